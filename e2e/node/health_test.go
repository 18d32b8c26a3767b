package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// nodeHealth is the volume's node conditions as "STATUS Reason".
func (e *env) nodeHealth(v *csi.Volume) []string {
	e.t.Helper()
	resp, err := e.nc.NodeGetVolumeHealth(ctx(e.t), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
	harness.Must(e.t, err, "NodeGetVolumeHealth")
	var got []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		got = append(got, h.GetStatus().String()+" "+h.GetReason())
	}
	return got
}

// An error the kernel's ext4 meets in a staged volume (raised through its
// own error path, /sys/fs/ext4/DEV/trigger_fs_error) is recorded in the
// superblock, and with errors=remount-ro shuts writes off: the node
// reports both, the first until fsck clears it.
func TestFilesystemHealth(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", singleWriter, "errors=remount-ro")
	v := e.createVolume("node-fs-health", 64*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	if got := e.nodeHealth(v); len(got) != 0 {
		t.Fatalf("a freshly staged volume reports %v", got)
	}

	dev, err := filepath.EvalSymlinks(mountSource(staging))
	harness.Must(t, err, "resolving the staged device")
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error")
	harness.Must(t, os.WriteFile(trigger, []byte("1"), 0o200), "raising an ext4 error")
	if err := os.WriteFile(filepath.Join(staging, "after-the-error"), []byte("x"), 0o600); err == nil {
		t.Fatalf("a write after the error succeeded: the filesystem was not remounted read-only")
	}
	want := "INACCESSIBLE FilesystemReadOnly; DEGRADED FilesystemErrors"
	if got := strings.Join(e.nodeHealth(v), "; "); got != want {
		t.Fatalf("after an ext4 error: %q, want %q", got, want)
	}
}

// A device that lags its image after an expansion is reported until the
// node's expansion refreshes it (a fuse mapping's loop device follows
// only then; krbd and rbd-nbd refresh by themselves).
func TestDeviceSmallerThanImageHealth(t *testing.T) {
	e := setup(t)
	c := blockCap(singleWriter)
	v := e.createVolume("node-size-health", 16*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	_, err := e.cc.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib}, VolumeCapability: c,
	})
	harness.Must(t, err, "ControllerExpandVolume")
	if got := strings.Join(e.nodeHealth(v), "; "); got != "DEGRADED DeviceSmallerThanImage" {
		t.Fatalf("after the controller's expansion: %q, want the device reported smaller", got)
	}
	target := e.path("target")
	e.publish(v, staging, target, c, false)
	_, err = e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{
		VolumeId: v.VolumeId, VolumePath: target, StagingTargetPath: staging, VolumeCapability: c,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib},
	})
	harness.Must(t, err, "NodeExpandVolume")
	if got := e.nodeHealth(v); len(got) != 0 {
		t.Fatalf("after the node's expansion: %v, want none", got)
	}
}
