package node

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestBlock walks a raw block volume through stage, two publishes (device
// files), expansion, unstage, a read-only stage whose device refuses
// writes, and a restage that finds the data.
func TestBlock(t *testing.T) {
	e := setup(t)
	c := blockCap(multiWriter)
	v := e.createVolume("node-block", 32*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	harness.Must(t, err, "repeated NodeStageVolume")
	_, err = e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, mountCap("ext4", multiWriter)))
	expectCode(t, err, codes.AlreadyExists, "stage as a filesystem after a block stage")

	a, b := e.path("a"), e.path("b")
	e.publish(v, staging, a, c, false)
	e.publish(v, staging, b, c, false)
	_, err = e.nc.NodePublishVolume(ctx(t), e.publishReq(v, staging, a, c, false))
	harness.Must(t, err, "repeated NodePublishVolume")
	_, err = e.nc.NodePublishVolume(ctx(t), e.publishReq(v, staging, e.path("fs"), mountCap("ext4", multiWriter), false))
	expectCode(t, err, codes.FailedPrecondition, "publish a block-staged volume as a filesystem")
	if _, err := os.Stat(e.path("fs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused publish created its target: %v", err)
	}
	if st, err := os.Stat(a); err != nil || st.Mode()&os.ModeDevice == 0 {
		t.Fatalf("target %s is not a device: %v %v", a, st, err)
	}

	const off = 4 * mib
	data := pattern(mib+512, "block")
	want := writeAt(t, a, off, data)
	if got := readAt(t, b, off, len(data)); got != want {
		t.Fatalf("read through the second target: %s, wrote %s", got, want)
	}

	for _, path := range []string{a, staging} {
		stats, err := e.nc.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: path})
		harness.Must(t, err, "NodeGetVolumeStats %s", path)
		if len(stats.Usage) != 1 || stats.Usage[0].Total != 32*mib {
			t.Errorf("stats at %s: %v, want 32 MiB", path, stats.Usage)
		}
	}

	_, err = e.cc.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 48 * mib}, VolumeCapability: c, Secrets: e.c.Secrets(),
	})
	harness.Must(t, err, "ControllerExpandVolume")
	exp, err := e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{
		VolumeId: v.VolumeId, VolumePath: a, StagingTargetPath: staging, VolumeCapability: c,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 48 * mib},
	})
	harness.Must(t, err, "NodeExpandVolume")
	if size := deviceSize(t, b); exp.CapacityBytes != 48*mib || size != 48*mib {
		t.Errorf("after expansion: capacity %d, device size %d; want %d", exp.CapacityBytes, size, 48*mib)
	}

	e.unpublish(v, a)
	e.unpublish(v, b)
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("target %s still exists after unpublish: %v", p, err)
		}
	}
	e.unstage(v, staging)
	if left := leftovers(e.dir); len(left) > 0 {
		t.Fatalf("left behind after unstage: %v", left)
	}

	// A reader-only access mode maps the device read-only: writes fail
	// even through a bind mount (which alone cannot stop device writes).
	roCap := blockCap(readerOnly)
	e.stage(v, staging, roCap)
	r := e.path("r")
	e.publish(v, staging, r, roCap, true)
	if got := readAt(t, r, off, len(data)); got != want {
		t.Errorf("read through the read-only device: %s, wrote %s", got, want)
	}
	if err := tryWrite(r); !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only device: %v, want EPERM or EROFS", err)
	}
	e.unpublish(v, r)
	e.unstage(v, staging)

	e.stage(v, staging, c)
	e.publish(v, staging, a, c, false)
	if got := readAt(t, a, off, len(data)); got != want {
		t.Errorf("after restage: %s, wrote %s", got, want)
	}
}

func writeAt(t *testing.T, dev string, off int64, data []byte) string {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	harness.Must(t, err, "open %s", dev)
	defer f.Close()
	_, err = f.WriteAt(data, off)
	harness.Must(t, err, "write %s", dev)
	harness.Must(t, f.Sync(), "sync %s", dev)
	return sum(data)
}

func readAt(t *testing.T, dev string, off int64, n int) string {
	t.Helper()
	f, err := os.Open(dev)
	harness.Must(t, err, "open %s", dev)
	defer f.Close()
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	harness.Must(t, err, "read %s", dev)
	return sum(buf)
}

func tryWrite(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
		return err
	}
	return f.Sync()
}

func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	f, err := os.Open(dev)
	harness.Must(t, err, "open %s", dev)
	defer f.Close()
	size, err := f.Seek(0, 2)
	harness.Must(t, err, "seek %s", dev)
	return size
}
