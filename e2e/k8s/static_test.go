//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTakeOverCephCSIVolume follows the README's procedure for a volume
// another driver made: an image named and tagged as ceph-csi leaves its
// volumes, holding a filesystem with data, is handed to this driver by a
// static PV (Retain) and a claim bound to it by name. A pod reads the data
// unchanged and writes more; after the claim and the PV are gone the image
// is still there, with both.
func TestTakeOverCephCSIVolume(t *testing.T) {
	scenario(t)
	k := newKube(t, "takeover")
	image := "csi-vol-5d9e0c7a-2b4f-4a61-8e3d-7f1a2b3c4d5e"
	tok := token(t)

	// The image as ceph-csi would leave it behind.
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	must(t, os.Mkdir(root, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "hello"), []byte(tok+"\n"), 0o644))
	file := filepath.Join(dir, "fs.img")
	must(t, os.WriteFile(file, nil, 0o600))
	must(t, os.Truncate(file, 64<<20))
	// runs: mkfs.ext4 (e2fsprogs), -d copies the directory into the new filesystem
	run(t, "mkfs.ext4", "-q", "-F", "-d", root, file)
	ceph(t, k.e, "rbd", "import", "--pool", pool, file, image)
	ceph(t, k.e, "rbd", "image-meta", "set", pool+"/"+image, "csi.storage.k8s.io/pvc/name", "old-claim")

	pvName := "static-" + k.ns
	handle := fmt.Sprintf("v1:%s:%s:%s", clusterIDOf(t, k.e), pool, image)
	t.Cleanup(func() {
		// Runs before newKube's cleanup (last in, first out): the pods and
		// the claim go, then the PV, then the image once it is detached.
		k.runQuiet(5*time.Minute, "delete", "pods", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(5*time.Minute, "delete", "pvc", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(5*time.Minute, "delete", "pv", pvName, "--wait=true", "--timeout=4m")
		eventually(t, volumeWait, "PV "+pvName+" detached", func() (bool, string) {
			vas := k.volumeAttachments(pvName)
			return len(vas) == 0, fmt.Sprintf("%d VolumeAttachments", len(vas))
		})
		ceph(t, k.e, "rbd", "rm", "--pool", pool, image)
	})
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[1]s
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: %[2]s, name: data}
  csi:
    driver: %[3]s
    volumeHandle: %[4]s
    fsType: ext4
    volumeAttributes: {staticVolume: "true", clusterID: %[5]s, pool: %[6]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: %[2]s
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: %[1]s
  resources:
    requests:
      storage: 64Mi
`, pvName, k.ns, driverName, handle, clusterIDOf(t, k.e), pool))
	pv := k.waitBound("data")
	if pv.Name != pvName {
		t.Fatalf("claim bound to %s, want the static PV %s", pv.Name, pvName)
	}

	k.createPod(podOpts{name: "reader", pvc: "data"})
	k.waitRunning("reader")
	if got := strings.TrimSpace(k.mustExec("reader", "cat /data/hello")); got != tok {
		t.Fatalf("the pod read %q from the taken-over volume, want %q", got, tok)
	}
	k.mustExec("reader", "echo after > /data/after && sync")
	k.deletePod("reader")
	k.runQuiet(5*time.Minute, "delete", "pvc", "data", "--wait=true", "--timeout=4m")
	k.runQuiet(5*time.Minute, "delete", "pv", pvName, "--wait=true", "--timeout=4m")
	eventually(t, volumeWait, "PV "+pvName+" detached", func() (bool, string) {
		vas := k.volumeAttachments(pvName)
		return len(vas) == 0, fmt.Sprintf("%d VolumeAttachments", len(vas))
	})

	// The image outlives its PV, with its data and the other driver's
	// metadata, and without our attachment record.
	if got := strings.TrimSpace(ceph(t, k.e, "rbd", "image-meta", "get", pool+"/"+image, "csi.storage.k8s.io/pvc/name")); got != "old-claim" {
		t.Errorf("the other driver's metadata changed to %q", got)
	}
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", pool+"/"+image); strings.Contains(meta, "rbdcsi.attach") {
		t.Errorf("an attachment record is left on the image: %s", meta)
	}
	export := filepath.Join(dir, "after.img")
	ceph(t, k.e, "rbd", "export", pool+"/"+image, export)
	// runs: debugfs (e2fsprogs), reads a file out of an unmounted ext4
	if out := run(t, "debugfs", "-R", "cat /after", export); strings.TrimSpace(out) != "after" {
		t.Errorf("the image does not hold what the pod wrote: %q", out)
	}
}

// clusterIDOf reads the clusterID of the e2e cluster map.
func clusterIDOf(t *testing.T, e env) string {
	t.Helper()
	data, err := os.ReadFile(e.clusterConfig)
	must(t, err)
	var clusters []struct {
		ClusterID string `json:"clusterID"`
	}
	must(t, json.Unmarshal(data, &clusters))
	if len(clusters) != 1 {
		t.Fatalf("%s: %d clusters, want 1", e.clusterConfig, len(clusters))
	}
	return clusters[0].ClusterID
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
