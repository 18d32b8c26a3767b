//go:build e2e_k8s

package k8s

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// exampleScenario applies some files of deploy/examples and checks that
// what they make works. needs, if set, skips the scenario (saying why)
// where this install or machine cannot run it.
type exampleScenario struct {
	name  string
	files []string
	run   func(t *testing.T, x *exampleRun)
	needs func(t *testing.T, k *kube)
}

// TestExamples applies every file of deploy/examples on this cluster, with
// the StorageClasses of the current install (kustomize or Helm), and checks
// that each reaches its working state: claims bound, pods running and
// writing, snapshots ready, restores and clones reading the data, limits
// on the image, a static image in use. What this machine cannot run skips,
// saying why; a file no scenario applies, or a claim of a class the
// install does not make, fails.
func TestExamples(t *testing.T) {
	scenario(t)
	loadEnv(t)
	scenarios := []exampleScenario{
		{"filesystem", []string{"pvc-filesystem.yaml", "pod-filesystem.yaml", "snapshot.yaml", "pvc-restore.yaml", "pvc-clone.yaml"}, exampleFilesystem, nil},
		{"block", []string{"pvc-block.yaml"}, exampleBlock, nil},
		{"encrypted", []string{"encrypted.yaml"}, exampleEncrypted, nil},
		{"qos-tiers", []string{"qos-tiers.yaml"}, exampleQoS, nil},
		{"group-snapshot", []string{"group-snapshot.yaml"}, exampleGroupSnapshot, needsGroupSnapshots},
		{"static-volume", []string{"static-volume.yaml"}, exampleStatic, nil},
		{"topology", []string{"topology.yaml"}, exampleTopology, needsZone},
	}
	var covered, files []string
	for _, s := range scenarios {
		covered = append(covered, s.files...)
	}
	entries, err := os.ReadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") {
			files = append(files, e.Name())
		}
	}
	sort.Strings(covered)
	if !slices.Equal(covered, files) {
		t.Fatalf("deploy/examples holds %v; the scenarios apply %v", files, covered)
	}
	checkExampleClasses(t, files)
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			if s.needs != nil {
				s.needs(t, &kube{t: t, e: loadEnv(t)})
			}
			s.run(t, newExampleRun(t, s.name))
		})
	}
}

// checkExampleClasses: every class an example's claim asks for is made by
// the install or by an example; a missing one fails here, before any
// scenario waits on a claim that cannot bind.
func checkExampleClasses(t *testing.T, files []string) {
	t.Helper()
	k := &kube{t: t, e: loadEnv(t)}
	var list storagev1.StorageClassList
	k.get(&list, "storageclasses")
	classes := map[string]bool{"": true} // a static PV's claim
	for _, sc := range list.Items {
		classes[sc.Name] = true
	}
	var claims []exampleObject
	for _, f := range files {
		for _, o := range readExample(t, f) {
			switch o.kind {
			case "StorageClass":
				classes[o.name] = true
			case "PersistentVolumeClaim":
				claims = append(claims, o)
			}
		}
	}
	for _, c := range claims {
		spec, _ := c.doc["spec"].(map[string]any)
		class, _ := spec["storageClassName"].(string)
		if !classes[class] {
			t.Errorf("%s: claim %s asks for StorageClass %q, which this install does not make", c.file, c.name, class)
		}
	}
}

// exampleFilesystem: the claim binds and its pod writes; the snapshot is
// ready; the restore and the clone read what the pod wrote.
func exampleFilesystem(t *testing.T, x *exampleRun) {
	x.apply("pvc-filesystem.yaml", nil)
	x.apply("pod-filesystem.yaml", nil)
	x.bound("rbd-pvc")
	x.k.waitRunning("rbd-fs-pod")
	eventually(t, shortWait, "rbd-fs-pod writing /data/hello", func() (bool, string) {
		out, err := x.k.run(shortWait, "", "exec", "rbd-fs-pod", "-c", "app", "--", "cat", "/data/hello")
		return err == nil && strings.TrimSpace(out) == "hello", fmt.Sprintf("%q %v", out, err)
	})
	x.execIn("rbd-fs-pod", "app", "sync")
	x.apply("snapshot.yaml", nil)
	x.k.waitSnapshotReady("rbd-pvc-snapshot")
	x.apply("pvc-restore.yaml", nil)
	x.apply("pvc-clone.yaml", nil)
	x.bound("rbd-pvc-restore")
	x.bound("rbd-pvc-clone")
	x.reads("rbd-pvc-restore", "hello")
	x.reads("rbd-pvc-clone", "hello")
}

// exampleBlock: the pod gets the whole claim as a device and what it
// writes there reads back.
func exampleBlock(t *testing.T, x *exampleRun) {
	x.apply("pvc-block.yaml", nil)
	x.bound("rbd-block-pvc")
	x.k.waitRunning("rbd-block-pod")
	if got := strings.TrimSpace(x.execIn("rbd-block-pod", "app", "blockdev --getsize64 /dev/xvda")); got != "1073741824" {
		t.Errorf("the pod's /dev/xvda holds %s bytes, want 1 GiB", got)
	}
	// Past the MiB the pod's own dd zeroes when it starts.
	out := x.execIn("rbd-block-pod", "app", "printf block-example | dd of=/dev/xvda bs=512 seek=4096 conv=fsync 2>/dev/null && dd if=/dev/xvda bs=512 skip=4096 count=1 2>/dev/null | head -c 13")
	if out != "block-example" {
		t.Errorf("the pod read %q back from /dev/xvda, want block-example", out)
	}
}

// exampleEncrypted: with a KEK in the Secret, as the example says, the
// claim binds to an image whose data key is wrapped by it; a pod needs
// dm-crypt on the node.
func exampleEncrypted(t *testing.T, x *exampleRun) {
	addKEK(t, x)
	x.apply("encrypted.yaml", func(o exampleObject) bool { return o.kind != "Pod" })
	img := imageOf(t, x.bound("rbd-encrypted-pvc"))
	meta := func(key string) string {
		return strings.TrimSpace(ceph(t, x.k.e, "rbd", "image-meta", "get", pool+"/"+img, key))
	}
	if kms, dek := meta("rbdcsi.crypt.kms"), meta("rbdcsi.crypt.dek"); kms != "secret" || !strings.HasPrefix(dek, "v2.k1.") {
		t.Errorf("image %s: KMS %q, data key %.12q...; want KMS secret and a key wrapped by KEK k1", img, kms, dek)
	}
	t.Run("pod", func(t *testing.T) {
		// What cryptsetup does first: open device-mapper's control device.
		// The node shares this machine's kernel.
		if f, err := os.OpenFile("/dev/mapper/control", os.O_RDWR, 0); err != nil {
			t.Skipf("this node's kernel has no device-mapper (%v): dm-crypt volumes are staged in the kernel VM tests (make kernel-test) instead", err)
		} else {
			f.Close()
		}
		x := x.sub(t)
		x.apply("encrypted.yaml", func(o exampleObject) bool { return o.kind == "Pod" })
		x.k.waitRunning("rbd-encrypted-pod")
		eventually(t, shortWait, "rbd-encrypted-pod writing /data/hello", func() (bool, string) {
			out, err := x.k.run(shortWait, "", "exec", "rbd-encrypted-pod", "-c", "app", "--", "cat", "/data/hello")
			return err == nil && strings.TrimSpace(out) == "secret", fmt.Sprintf("%q %v", out, err)
		})
		state := strings.TrimSpace(ceph(t, x.k.e, "rbd", "image-meta", "get", pool+"/"+img, "rbdcsi.crypt.state"))
		if state != "formatted" {
			t.Errorf("image %s: encryption state %q after the pod started, want formatted", img, state)
		}
	})
}

// addKEK makes the KEK Secret rbdcsi-keks that encrypted.yaml names, as
// its comment tells users to, and removes it once the scenario's volumes
// are gone. The controller mounts it (optional) for the KEK rotation.
func addKEK(t *testing.T, x *exampleRun) {
	t.Helper()
	driver := &kube{t: t, e: x.k.e, ns: "rbdcsi"}
	var s corev1.Secret
	if driver.get(&s, "secret", "rbdcsi-keks") {
		t.Fatal("Secret rbdcsi/rbdcsi-keks exists already (left by an earlier run?)")
	}
	kek := make([]byte, 32)
	if _, err := rand.Read(kek); err != nil {
		t.Fatal(err)
	}
	driver.must("create", "secret", "generic", "rbdcsi-keks", "--from-literal=encryptionKEK.k1="+base64.StdEncoding.EncodeToString(kek))
	x.after = append(x.after, func() {
		driver.runQuiet(time.Minute, "delete", "secret", "rbdcsi-keks", "--ignore-not-found")
	})
}

// exampleQoS: the claim's image has the limits of its tier, and moving it
// to the other tier changes them.
func exampleQoS(t *testing.T, x *exampleRun) {
	x.apply("qos-tiers.yaml", nil)
	img := imageOf(t, x.bound("rbd-qos-pvc"))
	limits := func() string {
		var kv []string
		for _, key := range []string{"conf_rbd_qos_iops_limit", "conf_rbd_qos_bps_limit"} {
			kv = append(kv, strings.TrimSpace(ceph(t, x.k.e, "rbd", "image-meta", "get", pool+"/"+img, key)))
		}
		return strings.Join(kv, " ")
	}
	// 2 GiB of silver: 500 + 2 x 10 IOPS, 50 MiB/s.
	if got := limits(); got != "520 52428800" {
		t.Fatalf("image %s of tier rbdcsi-silver: limits (iops bps) %q, want \"520 52428800\"", img, got)
	}
	x.k.must("patch", "pvc", "rbd-qos-pvc", "--type=merge", "-p", `{"spec":{"volumeAttributesClassName":"rbdcsi-gold"}}`)
	var pvc corev1.PersistentVolumeClaim
	eventually(t, volumeWait, "claim rbd-qos-pvc moved to rbdcsi-gold", func() (bool, string) {
		x.k.get(&pvc, "pvc", "rbd-qos-pvc")
		cur := pvc.Status.CurrentVolumeAttributesClassName
		return cur != nil && *cur == "rbdcsi-gold", fmt.Sprintf("current %v; %s", cur, lastEvent(x.k, "pvc", "rbd-qos-pvc"))
	})
	// 2 GiB of gold: 2000 + 2 x 50 IOPS, 200 MiB/s.
	if got := limits(); got != "2100 209715200" {
		t.Errorf("image %s after the move to rbdcsi-gold: limits (iops bps) %q, want \"2100 209715200\"", img, got)
	}
}

// exampleGroupSnapshot: the group snapshot is ready, with one ready member
// per claim of the selector.
func exampleGroupSnapshot(t *testing.T, x *exampleRun) {
	requireGroupController(t, x.k)
	x.apply("group-snapshot.yaml", func(o exampleObject) bool { return o.kind != "VolumeGroupSnapshot" })
	claims := []string{"rbd-db-data", "rbd-db-wal"}
	for _, c := range claims {
		x.bound(c)
	}
	x.apply("group-snapshot.yaml", func(o exampleObject) bool { return o.kind == "VolumeGroupSnapshot" })
	x.k.waitGroupSnapshotReady("rbd-db-snapshot")
	members := x.k.groupMembers("rbd-db-snapshot")
	var sources []string
	for src, snap := range members {
		sources = append(sources, src)
		x.k.waitSnapshotReady(snap)
	}
	sort.Strings(sources)
	if !slices.Equal(sources, claims) {
		t.Errorf("the group snapshot's members are of %v, want %v", sources, claims)
	}
}

// needsGroupSnapshots skips outside the group snapshot pass.
func needsGroupSnapshots(t *testing.T, _ *kube) {
	if os.Getenv("RBDCSI_E2E_GROUPSNAP") != "1" {
		t.Skip("needs the plugin image built on forky and a Tentacle cluster: the groupsnap pass of scripts/k8s-e2e.sh (E2E_PASSES=groupsnap) sets RBDCSI_E2E_GROUPSNAP=1")
	}
}

// exampleStatic: an image made outside the driver is used through the
// example's PV and claim, and outlives them.
func exampleStatic(t *testing.T, x *exampleRun) {
	var pv corev1.PersistentVolume
	for _, o := range readExample(t, "static-volume.yaml") {
		if o.kind == "PersistentVolume" {
			spec, _ := o.doc["spec"].(map[string]any)
			csi, _ := spec["csi"].(map[string]any)
			pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{VolumeHandle: fmt.Sprint(csi["volumeHandle"])}
		}
	}
	if pv.Spec.CSI == nil {
		t.Fatal("static-volume.yaml holds no PersistentVolume")
	}
	image := imageOf(t, pv)
	ceph(t, x.k.e, "rbd", "create", "--size", "1G", pool+"/"+image)
	removed := false
	x.after = append(x.after, func() {
		if !removed {
			ceph(t, x.k.e, "rbd", "rm", pool+"/"+image)
		}
	})
	x.apply("static-volume.yaml", nil)
	if got := x.bound("rbd-static-pvc"); got.Name != "rbd-static-pv" {
		t.Fatalf("claim rbd-static-pvc bound to %s, want the example's PV rbd-static-pv", got.Name)
	}
	x.k.waitRunning("rbd-static-pod")
	eventually(t, shortWait, "rbd-static-pod writing /data/hello", func() (bool, string) {
		out, err := x.k.run(shortWait, "", "exec", "rbd-static-pod", "-c", "app", "--", "cat", "/data/hello")
		return err == nil && strings.TrimSpace(out) == "hello", fmt.Sprintf("%q %v", out, err)
	})
	x.execIn("rbd-static-pod", "app", "sync")

	// The claim and the PV go; the image stays, with what the pod wrote.
	x.release()
	export := filepath.Join(t.TempDir(), "static.img")
	ceph(t, x.k.e, "rbd", "export", pool+"/"+image, export)
	// runs: debugfs (e2fsprogs), reads a file out of an unmounted ext4
	if out := run(t, "debugfs", "-R", "cat /hello", export); strings.TrimSpace(out) != "hello" {
		t.Errorf("image %s does not hold what the pod wrote: %q", image, out)
	}
	ceph(t, x.k.e, "rbd", "rm", pool+"/"+image)
	removed = true
}

// needsZone skips where the node plugin reports no zone (an install
// without --domain-labels), and fails where the node is in another zone
// than the one topology.yaml gives this cluster's pool.
func needsZone(t *testing.T, k *kube) {
	var csiNode storagev1.CSINode
	if !k.get(&csiNode, "csinode", k.e.nodeName) {
		t.Fatalf("no CSINode %s", k.e.nodeName)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driverName })
	if i < 0 || !slices.Contains(csiNode.Spec.Drivers[i].TopologyKeys, zoneKey) {
		t.Skipf("the node plugin on %s reports no %s: this install runs without --domain-labels (deploy/topology, the chart's node.domainLabels)", k.e.nodeName, zoneKey)
	}
	var node corev1.Node
	k.get(&node, "node", k.e.nodeName)
	if zone := node.Labels["topology.kubernetes.io/zone"]; zone != "zone-a" {
		t.Fatalf("node %s is in zone %q; topology.yaml's pool for this test's node is zone-a's", node.Name, zone)
	}
}

// exampleTopology: on a node that reports its zone, the pod's claim is
// bound in the pool of that zone, with node affinity to it.
func exampleTopology(t *testing.T, x *exampleRun) {
	x.apply("topology.yaml", nil)
	x.k.waitRunning("rbd-zoned-pod")
	pv := x.bound("rbd-zoned-pvc")
	imageOf(t, pv) // in pool rbd, zone-a's
	onlyZone(t, pv, "zone-a")
	eventually(t, shortWait, "rbd-zoned-pod writing /data/hello", func() (bool, string) {
		out, err := x.k.run(shortWait, "", "exec", "rbd-zoned-pod", "-c", "app", "--", "cat", "/data/hello")
		return err == nil && strings.TrimSpace(out) == "hello", fmt.Sprintf("%q %v", out, err)
	})
}
