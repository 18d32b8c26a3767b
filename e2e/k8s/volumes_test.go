//go:build e2e_k8s

package k8s

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestFilesystemPersists: a Filesystem PVC (ext4, xfs) is provisioned and
// bound; a pod writes a file; the pod is deleted (unpublish, unstage,
// detach); a new pod on the node reads the file back.
func TestFilesystemPersists(t *testing.T) {
	scenario(t)
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			k := newKube(t, "fs-"+fs)
			tok := token(t)
			// xfsprogs refuses filesystems under 300 MB.
			k.createPVC(pvcOpts{name: "data", class: "rbdcsi-" + fs, size: "512Mi"})
			pv := k.waitBound("data")
			img := imageOf(t, pv)
			if !strings.Contains(ceph(t, k.e, "rbd", "ls", "-p", pool), img) {
				t.Fatalf("image %s of PV %s is not in pool %s", img, pv.Name, pool)
			}
			// An admin can tell from the image which PVC and PV it serves.
			for key, want := range map[string]string{
				"rbdcsi.k8s.pvc.name": "data", "rbdcsi.k8s.pvc.namespace": k.ns, "rbdcsi.k8s.pv.name": pv.Name,
			} {
				if got := strings.TrimSpace(ceph(t, k.e, "rbd", "image-meta", "get", pool+"/"+img, key)); got != want {
					t.Errorf("image %s: metadata %s = %q, want %q", img, key, got, want)
				}
			}

			k.createPod(podOpts{name: "writer", pvc: "data"})
			k.waitRunning("writer")
			if mounts := k.mustExec("writer", "grep ' /data ' /proc/mounts"); !strings.Contains(mounts, " "+fs+" ") {
				t.Fatalf("/data is not %s: %s", fs, mounts)
			}
			k.mustExec("writer", fmt.Sprintf("echo %s > /data/hello && mkdir -p /data/dir && echo nested > /data/dir/f && sync", tok))
			k.deletePod("writer")

			k.createPod(podOpts{name: "reader", pvc: "data"})
			k.waitRunning("reader")
			if got := strings.TrimSpace(k.mustExec("reader", "cat /data/hello")); got != tok {
				t.Fatalf("new pod read %q, want %q", got, tok)
			}
			if got := strings.TrimSpace(k.mustExec("reader", "cat /data/dir/f")); got != "nested" {
				t.Fatalf("new pod read %q from /data/dir/f", got)
			}
			// The data is in the image, not in some cache of the node.
			if du := ceph(t, k.e, "rbd", "du", "-p", pool, img); !strings.Contains(du, img) {
				t.Fatalf("rbd du: %s", du)
			}
		})
	}
}

// TestBlockVolume: a Block PVC is handed to a pod as a device; raw bytes
// written at an offset are read back, also by a later pod.
func TestBlockVolume(t *testing.T) {
	scenario(t)
	k := newKube(t, "block")
	tok := "rbdcsi-block-" + token(t)
	k.createPVC(pvcOpts{name: "raw", class: "rbdcsi-block", size: "128Mi", block: true})
	k.waitBound("raw")

	k.createPod(podOpts{name: "writer", pvc: "raw", block: true})
	k.waitRunning("writer")
	k.mustExec("writer", "test -b /dev/xvda")
	size := strings.TrimSpace(k.mustExec("writer", "blockdev --getsize64 /dev/xvda"))
	if n, err := strconv.ParseInt(size, 10, 64); err != nil || n < 128<<20 {
		t.Fatalf("device size %q, want at least 128 MiB", size)
	}
	// Never formatted: a fresh block volume reads back zeroes.
	if z := strings.TrimSpace(k.mustExec("writer", "dd if=/dev/xvda bs=4096 count=16 2>/dev/null | tr -d '\\000' | wc -c")); z != "0" {
		t.Fatalf("a new block volume is not zeroed at the start: %s non-zero bytes", z)
	}
	k.mustExec("writer", fmt.Sprintf("printf '%%s' %s | dd of=/dev/xvda bs=4096 seek=1000 conv=notrunc,fsync 2>/dev/null", tok))
	read := fmt.Sprintf("dd if=/dev/xvda bs=4096 skip=1000 count=1 2>/dev/null | head -c %d", len(tok))
	if got := k.mustExec("writer", read); got != tok {
		t.Fatalf("read back %q, want %q", got, tok)
	}
	k.deletePod("writer")

	k.createPod(podOpts{name: "reader", pvc: "raw", block: true})
	k.waitRunning("reader")
	if got := k.mustExec("reader", read); got != tok {
		t.Fatalf("a new pod read %q, want %q", got, tok)
	}
}

// TestSnapshotRestoreClone: a VolumeSnapshot of a written, mounted PVC
// becomes readyToUse; the source moves on; a PVC restored from the snapshot
// sees the snapshot-time data, a PVC cloned from the source sees the
// current data; after the source PVC is deleted, a restore still works.
func TestSnapshotRestoreClone(t *testing.T) {
	scenario(t)
	k := newKube(t, "snap")
	k.createPVC(pvcOpts{name: "src", class: "rbdcsi-ext4", size: "256Mi"})
	srcImage := imageOf(t, k.waitBound("src"))
	k.createPod(podOpts{name: "src-pod", pvc: "src"})
	k.waitRunning("src-pod")
	k.mustExec("src-pod", "echo v1 > /data/state && sync")

	k.apply(`
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: snap1
spec:
  volumeSnapshotClassName: rbdcsi-snapclass
  source:
    persistentVolumeClaimName: src
`)
	k.waitSnapshotReady("snap1")
	// The image names the VolumeSnapshot its snapshot was taken for.
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", pool+"/"+srcImage); !strings.Contains(meta, `"volumeSnapshot":"snap1","namespace":"`+k.ns+`"`) {
		t.Errorf("image %s does not name VolumeSnapshot %s/snap1: %s", srcImage, k.ns, meta)
	}

	// The source moves on.
	k.mustExec("src-pod", "echo v2 > /data/state && sync")

	k.createPVC(pvcOpts{name: "restored", class: "rbdcsi-ext4", size: "256Mi", dataSource: "VolumeSnapshot/snap1"})
	k.createPVC(pvcOpts{name: "clone", class: "rbdcsi-ext4", size: "256Mi", dataSource: "PersistentVolumeClaim/src"})
	k.waitBound("restored")
	k.waitBound("clone")
	k.createPod(podOpts{name: "restored-pod", pvc: "restored"})
	k.createPod(podOpts{name: "clone-pod", pvc: "clone"})
	k.waitRunning("restored-pod")
	k.waitRunning("clone-pod")
	if got := strings.TrimSpace(k.mustExec("restored-pod", "cat /data/state")); got != "v1" {
		t.Errorf("restored volume reads %q, want the snapshot-time v1", got)
	}
	if got := strings.TrimSpace(k.mustExec("clone-pod", "cat /data/state")); got != "v2" {
		t.Errorf("cloned volume reads %q, want the clone-time v2", got)
	}
	if got := strings.TrimSpace(k.mustExec("src-pod", "cat /data/state")); got != "v2" {
		t.Errorf("source reads %q, want v2", got)
	}
	// Independent copies: writing the restore changes neither the source
	// nor the clone.
	k.mustExec("restored-pod", "echo v3 > /data/state && sync")
	if got := strings.TrimSpace(k.mustExec("src-pod", "cat /data/state")); got != "v2" {
		t.Errorf("source reads %q after writing the restore, want v2", got)
	}
	if got := strings.TrimSpace(k.mustExec("clone-pod", "cat /data/state")); got != "v2" {
		t.Errorf("clone reads %q after writing the restore, want v2", got)
	}

	// Delete the source PVC first; its snapshot stays restorable.
	k.deletePod("src-pod")
	k.must("delete", "pvc", "src", "--wait=true", "--timeout=3m")
	k.createPVC(pvcOpts{name: "restored-late", class: "rbdcsi-ext4", size: "256Mi", dataSource: "VolumeSnapshot/snap1"})
	k.waitBound("restored-late")
	k.createPod(podOpts{name: "late-pod", pvc: "restored-late"})
	k.waitRunning("late-pod")
	if got := strings.TrimSpace(k.mustExec("late-pod", "cat /data/state")); got != "v1" {
		t.Errorf("volume restored after the source's deletion reads %q, want v1", got)
	}
}

func (k *kube) waitSnapshotReady(name string) {
	k.t.Helper()
	var snap struct {
		Status *struct {
			ReadyToUse                     *bool   `json:"readyToUse"`
			BoundVolumeSnapshotContentName *string `json:"boundVolumeSnapshotContentName"`
			Error                          *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"status"`
	}
	eventually(k.t, volumeWait, "VolumeSnapshot "+name+" readyToUse", func() (bool, string) {
		if !k.get(&snap, "volumesnapshot", name) || snap.Status == nil {
			return false, "no status"
		}
		if snap.Status.Error != nil {
			return false, "error: " + snap.Status.Error.Message
		}
		return snap.Status.ReadyToUse != nil && *snap.Status.ReadyToUse, "not ready"
	})
	var content struct {
		Status *struct {
			SnapshotHandle *string `json:"snapshotHandle"`
		} `json:"status"`
	}
	if !k.get(&content, "volumesnapshotcontent", *snap.Status.BoundVolumeSnapshotContentName) ||
		content.Status == nil || content.Status.SnapshotHandle == nil || !strings.HasPrefix(*content.Status.SnapshotHandle, "s1:") {
		k.t.Fatalf("VolumeSnapshotContent of %s has no snapshot handle of this driver", name)
	}
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}
