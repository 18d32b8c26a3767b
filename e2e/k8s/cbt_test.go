//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/rbdcsi/rbdcsi/e2e/ranges"
)

// Changed-block tracking as backup tools see it: through the
// external-snapshot-metadata sidecar docs/backup.md turns on, asked by
// e2e/k8s/backuptool, which is built on that project's own client library
// and runs in a pod as a service account bound to the driver's client
// role, as a backup tool does.

const (
	cbtSize   = 64 << 20 // the claims' size, "64Mi"
	objectLen = 4 << 20  // RBD's object size: Ceph may round a new range out to it
)

// backupTool runs the backup tool in pods of one namespace.
type backupTool struct {
	k     *kube
	image string
	// svcIP is the sidecars' Service's cluster IP: the node has no cluster
	// DNS, so the tool's pods get the Service's name (the address of the
	// SnapshotMetadataService object, which the certificate holds) as a
	// host alias, as cluster DNS would resolve it. They run in the node's
	// network: the e2e's node forwards nothing between pods
	// (scripts/k8s-node.sh), and kube-proxy's rules take the node's own
	// traffic to the Service to the controller pods as they take a pod's.
	svcIP string
}

// newBackupTool gives the namespace a service account for the tool,
// bound to the client role the driver ships (docs/backup.md, step 4).
func newBackupTool(k *kube) backupTool {
	k.t.Helper()
	image := os.Getenv("E2E_BACKUPTOOL_IMAGE")
	if image == "" {
		k.t.Fatal("E2E_BACKUPTOOL_IMAGE is not set (run through scripts/k8s-e2e.sh)")
	}
	binding := k.ns + "-backup-tool"
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: ServiceAccount
metadata:
  name: backup-tool
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %s
  labels: {rbdcsi-e2e: test}
subjects:
- kind: ServiceAccount
  name: backup-tool
  namespace: %s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: rbdcsi-snapshot-metadata-client
`, binding, k.ns))
	k.t.Cleanup(func() { k.runQuiet(shortWait, "delete", "clusterrolebinding", binding, "--ignore-not-found") })
	var svc corev1.Service
	if !k.get(&svc, "-n", "rbdcsi", "service", "rbdcsi-snapshot-metadata") || svc.Spec.ClusterIP == "" {
		k.t.Fatal("no Service rbdcsi/rbdcsi-snapshot-metadata with a cluster IP: is changed-block tracking on (docs/backup.md)?")
	}
	return backupTool{k: k, image: image, svcIP: svc.Spec.ClusterIP}
}

// run runs script in a pod of the tool with the block claims (claim ->
// device path) and returns its output, once it has succeeded.
func (b backupTool) run(name, script string, devices map[string]string) string {
	k := b.k
	k.t.Helper()
	var uses, vols strings.Builder
	for pvc, dev := range devices {
		fmt.Fprintf(&uses, "    - {name: %s, devicePath: %s}\n", pvc, dev)
		fmt.Fprintf(&vols, "  - name: %s\n    persistentVolumeClaim: {claimName: %s}\n", pvc, pvc)
	}
	devs := ""
	if len(devices) > 0 {
		devs = "    volumeDevices:\n" + uses.String()
	}
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  serviceAccountName: backup-tool
  restartPolicy: Never
  hostNetwork: true
  hostAliases:
  - ip: %s
    hostnames: [rbdcsi-snapshot-metadata.rbdcsi]
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-euc", %q]
%s  volumes:
%s`, name, b.svcIP, b.image, script, devs, vols.String()))
	var p corev1.Pod
	eventually(k.t, volumeWait, "backup tool pod "+name+" done", func() (bool, string) {
		if !k.get(&p, "pod", name) {
			return false, "no pod"
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase) + " " + lastEvent(k, "pod", name)
	})
	out, err := k.run(shortWait, "", "logs", name)
	if err != nil || p.Status.Phase != corev1.PodSucceeded {
		k.t.Fatalf("backup tool pod %s: %s (%v):\n%s", name, p.Status.Phase, err, out)
	}
	k.deletePod(name)
	return out
}

// listing is what backuptool list and copy print.
type listing struct {
	Ranges   [][2]int64 `json:"ranges"`
	Capacity int64      `json:"capacity"`
	Records  int        `json:"records"`
	Copied   int64      `json:"copied"`
}

func (l listing) ranges() []ranges.Range {
	out := make([]ranges.Range, len(l.Ranges))
	for i, r := range l.Ranges {
		out[i] = ranges.Range{Off: r[0], N: r[1]}
	}
	return out
}

func decodeListing(t *testing.T, line string) listing {
	t.Helper()
	var l listing
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		t.Fatalf("the backup tool printed %q: %v", line, err)
	}
	if l.Capacity != cbtSize {
		t.Fatalf("the service says the volume has %d bytes, want %d", l.Capacity, cbtSize)
	}
	return l
}

// list asks for the ranges of snapshot (changed since base, when set),
// two per message, so the stream has several.
func (b backupTool) list(snapshot, base string) listing {
	b.k.t.Helper()
	args := fmt.Sprintf("backuptool list -namespace %s -snapshot %s -max-results 2", b.k.ns, snapshot)
	if base != "" {
		args += " -base " + base
	}
	l := decodeListing(b.k.t, strings.TrimSpace(b.run("list-"+snapshot, args, nil)))
	if n := len(l.Ranges); n > 2 && l.Records < (n+1)/2 {
		b.k.t.Errorf("%d ranges came in %d messages, with max_results 2", n, l.Records)
	}
	return l
}

// writeRanges writes random data over each range of the block claim in pod.
func (k *kube) writeRanges(pod string, rs []ranges.Range) {
	k.t.Helper()
	var script strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&script, "dd if=/dev/urandom of=/dev/xvda bs=4096 seek=%d count=%d conv=notrunc,fsync 2>/dev/null\n", r.Off/4096, r.N/4096)
	}
	k.mustExec(pod, script.String()+"sync")
}

func (k *kube) snapshot(name, pvc string) {
	k.t.Helper()
	k.apply(fmt.Sprintf(`
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: %s
spec:
  volumeSnapshotClassName: rbdcsi-snapclass
  source:
    persistentVolumeClaimName: %s
`, name, pvc))
	k.waitSnapshotReady(name)
}

// TestChangedBlockTracking: a Block claim, a Filesystem claim and a claim
// restored from another's snapshot each get two VolumeSnapshots with known
// writes between them. The tool lists the ranges and, for the Block claims,
// finds exactly the writes (Ceph's whole-object rounding aside); then it
// makes a backup and restores it, as a tool on changed-block tracking
// does: a full copy of the first snapshot from its allocated ranges, then
// the delta's ranges of the second, onto an empty claim, which must read
// as the second snapshot, byte for byte. (An encrypted volume's round
// trip needs dm-crypt, which this node's kernel lacks: the kernel test's
// nbd guest runs it, e2e/node TestEncryptedBackupRoundTrip.)
//
// The three run side by side, each in a namespace of its own: most of
// their time is spent waiting for claims and pods.
func TestChangedBlockTracking(t *testing.T) {
	scenario(t)
	for _, c := range []struct {
		kind     string
		restored bool
	}{{"block", false}, {"filesystem", false}, {"restored", true}} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			testChangedBlocks(t, c.kind, c.restored)
		})
	}
}

func testChangedBlocks(t *testing.T, kind string, restored bool) {
	k := newKube(t, "cbt-"+kind)
	tool := newBackupTool(k)
	block := kind != "filesystem"
	class := "rbdcsi-block"
	if !block {
		class = "rbdcsi-ext4"
	}
	size := fmt.Sprint(cbtSize)

	var parent []ranges.Range
	source := ""
	if restored {
		parent = ranges.Of(30<<20, 1<<20)
		k.createPVC(pvcOpts{name: "parent", class: class, size: size, block: true})
		k.waitBound("parent")
		k.createPod(podOpts{name: "parent-writer", pvc: "parent", block: true})
		k.waitRunning("parent-writer")
		k.writeRanges("parent-writer", parent)
		k.snapshot("parent-snap", "parent")
		k.deletePod("parent-writer")
		source = "VolumeSnapshot/parent-snap"
	}
	k.createPVC(pvcOpts{name: "src", class: class, size: size, block: block, dataSource: source})
	k.waitBound("src")
	k.createPod(podOpts{name: "writer", pvc: "src", block: block})
	k.waitRunning("writer")

	first := ranges.Of(0, 64<<10, 8<<20, 4<<20)
	second := ranges.Of(2<<20, 4096, 20<<20, 128<<10, 40<<20-4096, 8192)
	if block {
		k.writeRanges("writer", first)
	} else {
		k.mustExec("writer", "dd if=/dev/urandom of=/data/one bs=1M count=3 2>/dev/null && sync")
	}
	k.snapshot("s1", "src")
	if block {
		k.writeRanges("writer", second)
	} else {
		k.mustExec("writer", "dd if=/dev/urandom of=/data/two bs=1M count=2 2>/dev/null && "+
			"dd if=/dev/urandom of=/data/one bs=4096 seek=100 count=16 conv=notrunc 2>/dev/null && sync")
	}
	k.snapshot("s2", "src")

	full, delta := tool.list("s1", ""), tool.list("s2", "s1")
	if block {
		ranges.Covers(t, "allocated of s1", full.ranges(), append(first, parent...), objectLen)
		ranges.Covers(t, "delta s1..s2", delta.ranges(), second, objectLen)
	} else if len(delta.Ranges) == 0 {
		t.Fatal("the delta of the filesystem's two snapshots is empty")
	}

	// The backup's two parts come from the snapshots, restored as Block
	// claims (a Filesystem claim's snapshot too, as backup tools read it:
	// its contents allow the mode change), onto an empty Block claim.
	for _, s := range []string{"s1", "s2"} {
		if !block {
			k.allowModeChange(s)
		}
		k.createPVC(pvcOpts{name: "from-" + s, class: "rbdcsi-block", size: size, block: true, dataSource: "VolumeSnapshot/" + s})
	}
	k.createPVC(pvcOpts{name: "copy", class: "rbdcsi-block", size: size, block: true})
	for _, c := range []string{"from-s1", "from-s2", "copy"} {
		k.waitBound(c)
	}
	out := tool.run("round-trip", fmt.Sprintf(`
backuptool copy -namespace %[1]s -snapshot s1 -from /dev/s1 -to /dev/copy
backuptool sum /dev/copy %[2]d; backuptool sum /dev/s1 %[2]d
backuptool copy -namespace %[1]s -snapshot s2 -base s1 -from /dev/s2 -to /dev/copy
backuptool sum /dev/copy %[2]d; backuptool sum /dev/s2 %[2]d
`, k.ns, cbtSize), map[string]string{"from-s1": "/dev/s1", "from-s2": "/dev/s2", "copy": "/dev/copy"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("the round trip printed %d lines, want 6:\n%s", len(lines), out)
	}
	fullCopy, deltaCopy := decodeListing(t, lines[0]), decodeListing(t, lines[3])
	switch {
	case lines[1] != lines[2]:
		t.Fatalf("the full copy of s1 (%s) does not read as s1 (%s)", lines[1], lines[2])
	case lines[4] != lines[5]:
		t.Fatalf("the copy of s1 with the delta to s2 (%s) does not read as s2 (%s)", lines[4], lines[5])
	case lines[2] == lines[5]:
		t.Fatal("s1 and s2 read the same: the writes between them did not reach the snapshots")
	}
	// The incremental part copied the changes, not the volume.
	if deltaCopy.Copied > 16<<20 {
		t.Errorf("the delta copied %d bytes of a %d-byte volume", deltaCopy.Copied, cbtSize)
	}
	t.Logf("%s: a full backup of s1 copied %d bytes in %d ranges, the delta to s2 %d bytes in %d ranges",
		kind, fullCopy.Copied, len(fullCopy.Ranges), deltaCopy.Copied, len(deltaCopy.Ranges))
}

// allowModeChange lets a Block claim be restored from the Filesystem
// claim's snapshot name: the annotation on its VolumeSnapshotContent that
// csi-provisioner's --prevent-volume-mode-conversion asks for.
func (k *kube) allowModeChange(snapshot string) {
	k.t.Helper()
	var vs struct {
		Status struct {
			Content string `json:"boundVolumeSnapshotContentName"`
		} `json:"status"`
	}
	if !k.get(&vs, "volumesnapshot", snapshot) || vs.Status.Content == "" {
		k.t.Fatalf("VolumeSnapshot %s has no content", snapshot)
	}
	k.must("annotate", "volumesnapshotcontent", vs.Status.Content, "snapshot.storage.kubernetes.io/allow-volume-mode-change=true")
}
