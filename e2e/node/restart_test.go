package node

import (
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestKilledBetweenStageAndUnstage SIGKILLs the plugin with a filesystem
// and a block volume staged and published, restarts it, and expects the
// mappings to have survived and every later call to work from the state
// records alone; then kills it once more before the unstage.
func TestKilledBetweenStageAndUnstage(t *testing.T) {
	e := setup(t)
	fsCap, blkCap := mountCap("ext4", multiWriter), blockCap(multiWriter)
	fsVol := e.createVolume("node-restart-fs", 64*mib, fsCap)
	blkVol := e.createVolume("node-restart-block", 32*mib, blkCap)
	fsStaging, blkStaging := e.path("fs-staging"), e.path("blk-staging")
	fsTarget, blkTarget := e.path("fs-target"), e.path("blk-target")
	e.stage(fsVol, fsStaging, fsCap)
	e.stage(blkVol, blkStaging, blkCap)
	e.publish(fsVol, fsStaging, fsTarget, fsCap, false)
	e.publish(blkVol, blkStaging, blkTarget, blkCap, false)
	fsSum := writeRandom(t, filepath.Join(fsTarget, "data"), 2*mib)
	blkData := pattern(mib, "restart")
	blkSum := writeAt(t, blkTarget, 0, blkData)

	e.p.Kill()
	if m := mappings(e.dir); len(m) != 2 {
		t.Fatalf("after the plugin was killed: mappings %v, want 2 (they must outlive it)", m)
	}
	e.p.Start()

	// Restarted: repeats are no-ops, the data is there, stats work.
	_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(fsVol, fsStaging, fsCap))
	harness.Must(t, err, "NodeStageVolume after restart")
	_, err = e.nc.NodePublishVolume(ctx(t), e.publishReq(blkVol, blkStaging, blkTarget, blkCap, false))
	harness.Must(t, err, "NodePublishVolume after restart")
	if got := fileSum(t, filepath.Join(fsTarget, "data")); got != fsSum {
		t.Errorf("fs data after restart: %s, wrote %s", got, fsSum)
	}
	if got := readAt(t, blkTarget, 0, len(blkData)); got != blkSum {
		t.Errorf("block data after restart: %s, wrote %s", got, blkSum)
	}
	_, err = e.nc.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: fsVol.VolumeId, VolumePath: fsTarget})
	harness.Must(t, err, "NodeGetVolumeStats after restart")

	e.unpublish(fsVol, fsTarget)
	e.unpublish(blkVol, blkTarget)
	e.p.Kill()
	e.p.Start()
	e.unstage(fsVol, fsStaging)
	e.unstage(blkVol, blkStaging)
	if left := leftovers(e.dir); len(left) > 0 {
		t.Errorf("left behind after unstage: %v", left)
	}
}

// TestConcurrentStage fires several stages of one volume at once: each
// either stages or is told Aborted at once; the volume ends up mapped once.
func TestConcurrentStage(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", multiWriter)
	v := e.createVolume("node-concurrent", 64*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	e.unstage(v, staging)

	var wg sync.WaitGroup
	codesSeen := make(chan codes.Code, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
			codesSeen <- status.Code(err)
		}()
	}
	wg.Wait()
	close(codesSeen)
	ok := 0
	for code := range codesSeen {
		switch code {
		case codes.OK:
			ok++
		case codes.Aborted:
		default:
			t.Errorf("concurrent stage: %v, want OK or Aborted", code)
		}
	}
	if ok == 0 {
		t.Errorf("no concurrent stage succeeded")
	}
	_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	harness.Must(t, err, "stage after the burst")
	if m := mappings(e.dir); len(m) != 1 {
		t.Errorf("mappings %v for one volume", m)
	}
	want := 1 // the staging mount, and with fuse the FUSE mount below it
	if mounter() == "fuse" {
		want = 2
	}
	if m := mountsUnder(e.dir); len(m) != want {
		t.Errorf("mounts: %v, want %d (the staging mount and any FUSE mount)", m, want)
	}
}

// TestStagedVolumeLostOnReboot: the records survive a node reboot, the
// mounts and mappings do not. The plugin must notice, report the volume
// unhealthy, refuse to publish an empty staging directory, and stage the
// volume again (same data, no reformat) when asked.
func TestStagedVolumeLostOnReboot(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", multiWriter)
	v := e.createVolume("node-reboot", 64*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	sumBefore := writeRandom(t, filepath.Join(staging, "data"), mib)
	dev := mountSource(staging)
	uuid := fsUUID(t, dev)

	// "Reboot": the plugin dies and every mount and mapping goes away.
	e.p.Kill()
	harness.Must(t, syscall.Unmount(staging, 0), "umount staging")
	dropMapping(t, dev)
	for _, m := range mountsUnder(e.state) {
		harness.Must(t, syscall.Unmount(strings.Fields(m)[0], 0), "umount %s", m)
	}
	e.p.Start()

	health, err := e.nc.NodeGetVolumeHealth(ctx(t), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
	harness.Must(t, err, "NodeGetVolumeHealth")
	if len(health.VolumeHealth.HealthStatuses) == 0 || health.VolumeHealth.HealthStatuses[0].Status != csi.VolumeHealthErrorType_INACCESSIBLE {
		t.Errorf("health of a volume that lost its mapping: %v", health.VolumeHealth)
	}
	_, err = e.nc.NodePublishVolume(ctx(t), e.publishReq(v, staging, e.path("target"), c, false))
	expectCode(t, err, codes.FailedPrecondition, "publish of a volume that lost its staging mount")

	_, err = e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	harness.Must(t, err, "NodeStageVolume after the reboot")
	if got := fsUUID(t, mountSource(staging)); got != uuid {
		t.Errorf("UUID %q after restage, was %q", got, uuid)
	}
	if got := fileSum(t, filepath.Join(staging, "data")); got != sumBefore {
		t.Errorf("data after the reboot: %s, wrote %s", got, sumBefore)
	}
	health, err = e.nc.NodeGetVolumeHealth(ctx(t), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
	harness.Must(t, err, "NodeGetVolumeHealth")
	if len(health.VolumeHealth.HealthStatuses) != 0 {
		t.Errorf("health after restage: %v", health.VolumeHealth)
	}
}
