//go:build e2e_k8s

package k8s

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestZZCleanupLeavesNothing runs last (file and name order): with every
// test namespace gone (pods, snapshots, claims deleted through the driver),
// the pool holds no image, no snapshot, nothing in the trash, no RBD group
// and no group snapshot record, and the node
// has no CSI mount, no loop device over an rbd-fuse file, no rbd-fuse
// process and no state record left.
func TestZZCleanupLeavesNothing(t *testing.T) {
	final(t)
	e := loadEnv(t)
	k := &kube{t: t, e: e}
	if _, err := k.run(10*time.Minute, "", "delete", "namespace", "-l", "rbdcsi-e2e=test", "--wait=true", "--timeout=8m"); err != nil {
		t.Fatal(err)
	}
	eventually(t, volumeWait, "every PersistentVolume, VolumeSnapshotContent and VolumeGroupSnapshotContent gone", func() (bool, string) {
		out := k.must("get", "pv,volumesnapshotcontents,volumegroupsnapshotcontents,volumeattachments", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})

	// Ceph: RBD deletes are synchronous here (no trash purge schedule), but
	// a deleted volume that still had dependents is reclaimed with its last
	// dependent: allow a moment.
	eventually(t, shortWait, "an empty pool", func() (bool, string) {
		images := strings.TrimSpace(ceph(t, e, "rbd", "ls", "-l", "-p", pool))
		trash := strings.TrimSpace(ceph(t, e, "rbd", "trash", "ls", "--all", "-p", pool))
		return images == "" && trash == "", "images: " + images + "; trash: " + trash
	})
	// No object of an image either (header, id, data, object map). A
	// data object written before a snapshot keeps a clone until the OSDs
	// trim the removed snapshot, in the background after the image is
	// gone (rados ls lists it meanwhile; the test cluster does not pace
	// the trim, scripts/ceph-cluster-up.sh): allow that moment too; a
	// leaked object stays.
	var left []string
	start := time.Now()
	for deadline := start.Add(shortWait); ; time.Sleep(2 * time.Second) {
		left = left[:0]
		for _, obj := range strings.Fields(ceph(t, e, "rados", "-p", pool, "ls")) {
			for _, prefix := range []string{"rbd_header.", "rbd_id.", "rbd_data.", "rbd_object_map."} {
				if strings.HasPrefix(obj, prefix) {
					left = append(left, obj)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, obj := range left {
		t.Errorf("object %q of an image left in pool %s", obj, pool)
	}
	if waited := time.Since(start); len(left) == 0 && waited > 5*time.Second {
		t.Logf("the objects of deleted images were gone after %v", waited.Round(time.Second))
	}

	checkNoGroupLeft(t, e)

	// The node.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, "kubernetes.io/csi") || strings.Contains(line, "kubernetes.io~csi") ||
			strings.Contains(line, stateDirHost) || (strings.Contains(line, "rbd-fuse") && nodeMount(line, e)) {
			t.Errorf("mount left on the node: %s", line)
		}
	}
	// The backing files as sysfs has them: `losetup -a` stats each one and
	// hangs on a FUSE file whose rbd-fuse no longer answers (one that some
	// other test on this machine left, say).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "losetup", "-n", "-O", "NAME,BACK-FILE").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -n -O NAME,BACK-FILE: %v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, stateDirHost) {
			t.Errorf("loop device left on the node: %s", line)
		}
	}
	if out, _ := exec.Command("pgrep", "-a", "rbd-fuse").Output(); len(out) > 0 {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(line, stateDirHost) || strings.Contains(line, e.cephConf) {
				t.Errorf("rbd-fuse process left: %s", line)
			}
		}
	}
	// And the driver itself never restarted (crash, liveness probe).
	checkDriverNotRestarted(t, k)

	// The node plugin's state records (DaemonSet hostPath).
	if entries, err := os.ReadDir(stateDirHost); err == nil {
		for _, d := range entries {
			sub, _ := os.ReadDir(stateDirHost + "/" + d.Name())
			if !d.IsDir() || len(sub) > 0 {
				t.Errorf("state left in %s: %s", stateDirHost, d.Name())
			}
		}
	}
}

// nodeMount: the mountinfo line's mount point is one of this node's paths
// (kubelet's and the driver's under /var/lib, the run's work directory),
// not a path of some other test running on this machine.
func nodeMount(line string, e env) bool {
	f := strings.Fields(line)
	if len(f) < 5 {
		return false
	}
	return strings.HasPrefix(f[4], "/var/lib/") || strings.HasPrefix(f[4], e.work+"/")
}
