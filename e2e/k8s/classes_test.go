//go:build e2e_k8s

package k8s

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNonDefaultFeaturesAndMkfsOptions: a StorageClass of the user's own
// with imageFeatures and mkfsOptions: the image has exactly those
// features, and the filesystem a pod writes to was made with those
// options (read from an rbd export once the volume is unstaged).
func TestNonDefaultFeaturesAndMkfsOptions(t *testing.T) {
	scenario(t)
	k := newKube(t, "classes")
	name := "rbdcsi-e2e-" + k.ns
	params := k.shippedClassParams("clusterID", "pool")
	t.Cleanup(func() {
		k.runQuiet(5*time.Minute, "delete", "pods,pvc", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(time.Minute, "delete", "storageclass", name, "--ignore-not-found")
	})
	k.apply(fmt.Sprintf(`
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: %s
reclaimPolicy: Delete
parameters:
%s
  imageFeatures: layering,exclusive-lock
  mkfsOptions: "-m 1 -L e2e-label -O ^metadata_csum"
`, name, driverName, params))
	k.createPVC(pvcOpts{name: "data", class: name, size: "64Mi"})
	pv := k.waitBound("data")
	img := imageOf(t, pv)
	info := ceph(t, k.e, "rbd", "info", pool+"/"+img)
	if !strings.Contains(info, "features: layering, exclusive-lock\n") {
		t.Errorf("image %s of class %s: %s", img, name, info)
	}

	k.createPod(podOpts{name: "writer", pvc: "data"})
	k.waitRunning("writer")
	k.mustExec("writer", "echo hello > /data/f && sync")
	k.deletePod("writer")
	eventually(t, volumeWait, "PV "+pv.Name+" detached", func() (bool, string) {
		vas := k.volumeAttachments(pv.Name)
		return len(vas) == 0, fmt.Sprintf("%d VolumeAttachments", len(vas))
	})
	export := filepath.Join(t.TempDir(), "fs.img")
	ceph(t, k.e, "rbd", "export", pool+"/"+img, export)
	// runs: dumpe2fs (e2fsprogs), the superblock of an unmounted ext4
	sb := run(t, "dumpe2fs", "-h", export)
	field := func(name string) string {
		for _, line := range strings.Split(sb, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	var blocks, reserved int
	fmt.Sscan(field("Block count"), &blocks)
	fmt.Sscan(field("Reserved block count"), &reserved)
	if label := field("Filesystem volume name"); label != "e2e-label" || blocks == 0 || reserved != blocks/100 {
		t.Errorf("the filesystem was not made with -m 1 -L e2e-label: label %q, %d of %d blocks reserved", label, reserved, blocks)
	}
	if strings.Contains(field("Filesystem features"), "metadata_csum") {
		t.Errorf("the filesystem has metadata_csum, which the class's mkfsOptions turned off: %s", field("Filesystem features"))
	}
}
