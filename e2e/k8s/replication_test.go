//go:build e2e_k8s

package k8s

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// replicationWait bounds each step that waits for rbd-mirror (a look and a
// report every 5 s, scripts/k8s-e2e.sh) and for the csi-addons controller,
// which retries a failed call with a growing delay (a promote that waits
// for the demotion).
const replicationWait = 5 * time.Minute

// TestVolumeReplicationRelocatesToSecondSite follows docs/disaster-recovery.md's
// Kubernetes runbook through the csi-addons controller: a claim on site A
// written by a pod (sha256 of its data), a VolumeReplicationClass and a
// VolumeReplication primary on it; once B's rbd-mirror replays the image,
// the pod goes and the VolumeReplication turns secondary (demote A, the
// last mirror snapshot); on B, a static PV naming B's cluster and the
// same image, a claim and a VolumeReplication primary (promote B); a pod
// on B reads the data A wrote. Then replication is disabled at B, whose
// copy the test removes, and A's rbd-mirror removes A's.
func TestVolumeReplicationRelocatesToSecondSite(t *testing.T) {
	scenario(t)
	k := newKube(t, "replication")
	g := loadGuideRun(t)
	b := loadSiteB(t, k.e)
	waitSidecarsConnected(t, k.e)

	// The driver's side of site B: its users there, its cluster map entry.
	b.addUsers(t, k.e, g.values["CSI_USER"], g.values["NODE_USER"])
	b.addToClusterMap(t, k)
	// The Secret the class names: the controller's user (the csi-addons
	// sidecar v0.13.0 reads one for every replication call).
	addReplicationSecret(t, k, g.values["CSI_USER"])
	class, classB := "e2e-replication", "e2e-replication-b"
	k.apply(fmt.Sprintf(`
apiVersion: replication.storage.openshift.io/v1alpha1
kind: VolumeReplicationClass
metadata:
  name: %[1]s
spec:
  provisioner: %[2]s
  parameters:
    mirroringMode: snapshot
    schedulingInterval: 1m
    replication.storage.openshift.io/replication-secret-name: rbdcsi-replication
    replication.storage.openshift.io/replication-secret-namespace: rbdcsi
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %[3]s
provisioner: %[2]s
reclaimPolicy: Retain
parameters:
  clusterID: %[4]s
  pool: %[5]s
  csi.storage.k8s.io/fstype: ext4
`, class, driverName, classB, b.clusterID, pool))

	// Site A: the application's claim and its data.
	k.createPVC(pvcOpts{name: "data", class: "rbdcsi-ext4", size: "64Mi"})
	pvA := k.waitBound("data")
	image := imageOf(t, pvA)
	pvB := "e2e-replication-b-" + image
	t.Cleanup(func() { cleanupReplication(t, k, b, image, pvB, class, classB) })
	k.createPod(podOpts{name: "writer", pvc: "data"})
	k.waitRunning("writer")
	sum := strings.Fields(k.mustExec("writer", "head -c 4194304 /dev/urandom > /data/blob && sync && sha256sum /data/blob"))[0]

	k.setReplication("data-a", class, "data", "primary", replicationWait)
	if m := imageMirror(t, k.e, image); m.state != "enabled" || !m.primary {
		t.Fatalf("A's image after the VolumeReplication turned primary: %+v, want mirroring enabled, primary", m)
	}
	eventually(t, replicationWait, "B's rbd-mirror replaying the image", func() (bool, string) {
		st := mirrorStatus(b.e, image)
		return strings.HasPrefix(st, "up+replaying"), st
	})

	// Relocation, step 1: the application stops on A. Step 2: demote A.
	k.deletePod("writer")
	k.setReplication("data-a", class, "data", "secondary", replicationWait)
	if m := imageMirror(t, k.e, image); m.primary {
		t.Fatalf("A's image after the VolumeReplication turned secondary: %+v, want it demoted", m)
	}

	// Step 3, on B: the copy in a static PV naming B's cluster, and a
	// VolumeReplication primary; the promote waits until A's demotion has
	// arrived.
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[1]s
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: %[2]s
  claimRef: {namespace: %[3]s, name: data-b}
  csi:
    driver: %[4]s
    volumeHandle: v1:%[5]s:%[6]s:%[7]s
    fsType: ext4
    volumeAttributes: {clusterID: %[5]s, pool: %[6]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-b
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: %[2]s
  volumeName: %[1]s
  resources:
    requests:
      storage: 64Mi
`, pvB, classB, k.ns, driverName, b.clusterID, pool, image))
	k.waitBound("data-b")
	k.setReplication("data-b", class, "data-b", "primary", replicationWait)
	if m := imageMirror(t, b.e, image); m.state != "enabled" || !m.primary {
		t.Fatalf("B's copy after its VolumeReplication turned primary: %+v, want mirroring enabled, primary", m)
	}

	// Step 4: the application on B reads what A wrote.
	k.createPod(podOpts{name: "reader", pvc: "data-b"})
	k.waitRunning("reader")
	if got := strings.Fields(k.mustExec("reader", "sha256sum /data/blob"))[0]; got != sum {
		t.Fatalf("B's copy reads sha256 %s, A wrote %s", got, sum)
	}
	// A, demoted, replays from B (A's VolumeReplication's resync reports
	// it ready once A's rbd-mirror does).
	eventually(t, replicationWait, "A's rbd-mirror replaying from B", func() (bool, string) {
		st := mirrorStatus(k.e, image)
		return strings.HasPrefix(st, "up+replaying"), st
	})
}

// cleanupReplication ends the scenario as docs/disaster-recovery.md's
// runbook says to stop replicating, from whatever state a failure left:
// the pods go; B's VolumeReplication, deleted, disables replication at
// B's primary copy, and A's rbd-mirror then removes A's copy, so A's
// VolumeReplication finds nothing left to disable and A's claim deletes
// nothing. What a run that failed half-way left mirrored is disabled as
// admin. B's copy, in a PV the driver did not provision (Retain), is
// removed as admin, and B's pool must then be empty.
func cleanupReplication(t *testing.T, k *kube, b siteB, image, pvB, class, classB string) {
	k.runQuiet(5*time.Minute, "delete", "pods", "--all", "--wait=true", "--timeout=4m")
	stuckB := k.dropReplication("data-b", "data-b", 3*time.Minute)
	if !stuckB {
		// Nothing to wait for where A's image never mirrored.
		eventually(t, replicationWait, "A's rbd-mirror removing A's copy", func() (bool, string) {
			m := imageMirror(t, k.e, image)
			return !m.exists || m.state != "enabled", fmt.Sprintf("%+v; %s", m, mirrorStatus(k.e, image))
		})
	}
	stuckA := k.dropReplication("data-a", "data", 3*time.Minute)
	if (stuckA || stuckB) && !t.Failed() {
		t.Errorf("a VolumeReplication was not deleted (A: %v, B: %v): its volume's replication could not be disabled", stuckA, stuckB)
	}
	for _, e := range []env{k.e, b.e} {
		if m := imageMirror(t, e, image); m.exists && m.state == "enabled" {
			if !t.Failed() {
				t.Errorf("image %s left mirrored at %s: %+v", image, e.cephConf, m)
			}
			_, _ = cephTry(e, "rbd", "mirror", "image", "disable", "--force", pool+"/"+image)
		}
	}
	k.runQuiet(5*time.Minute, "delete", "pvc", "--all", "--wait=true", "--timeout=4m")
	k.runQuiet(5*time.Minute, "delete", "pv", pvB, "--ignore-not-found", "--wait=true", "--timeout=4m")
	eventually(t, volumeWait, "PV "+pvB+" detached", func() (bool, string) {
		vas := k.volumeAttachments(pvB)
		return len(vas) == 0, fmt.Sprintf("%d VolumeAttachments", len(vas))
	})
	if m := imageMirror(t, b.e, image); m.exists {
		ceph(t, b.e, "rbd", "snap", "purge", pool+"/"+image)
		ceph(t, b.e, "rbd", "rm", pool+"/"+image)
	}
	if images := strings.TrimSpace(ceph(t, b.e, "rbd", "ls", "-l", "-p", pool)); images != "" {
		t.Errorf("site B's pool holds images after the cleanup: %s", images)
	}
	if trash := strings.TrimSpace(ceph(t, b.e, "rbd", "trash", "ls", "--all", "-p", pool)); trash != "" {
		t.Errorf("site B's pool holds trash after the cleanup: %s", trash)
	}
	k.runQuiet(shortWait, "delete", "volumereplicationclass", class, "--ignore-not-found")
	k.runQuiet(shortWait, "delete", "storageclass", classB, "--ignore-not-found")
}
