package node

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// With the monitor unreachable, NodeStage answers Unavailable or
// DeadlineExceeded within its deadline and leaves no mapping behind; once
// the monitor is back the same call succeeds.
func TestNodeStageMonitorOutage(t *testing.T) {
	e := setup(t, "--ceph-timeout", "3s")
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("outage", 64*mib, c)
	staging := e.path("staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")

	resume := harness.PauseMonitor(t, e.c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	start := time.Now()
	_, err := e.nc.NodeStageVolume(ctx, e.stageReq(v, staging, c))
	cancel()
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("NodeStage during the outage: %v (want Unavailable or DeadlineExceeded)", err)
	}
	if took := time.Since(start); took > 25*time.Second {
		t.Errorf("NodeStage during the outage took %v, past its 20 s deadline", took)
	}
	if left := leftovers(e.dir); len(left) > 0 {
		t.Errorf("a failed stage left: %v", left)
	}
	resume()
	// The failed attempt may still be running in the plugin: a kernel map
	// waits for the monitor for as long as its mount_timeout. Retry while
	// the plugin says Aborted, as kubelet does.
	e.stageRetryingAborted(v, staging, c)
}

// A plugin killed between mapping and mounting, then restarted: the retried
// stage converges and unstage leaves nothing behind (the test's cleanup
// checks mappings, loop devices, FUSE mounts and rbd-fuse processes).
func TestNodeStageCrashConverges(t *testing.T) {
	e := setup(t, "--test-crash-at", "NodeStage:mapped")
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("crash", 64*mib, c)
	staging := e.path("staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")

	if _, err := e.nc.NodeStageVolume(harness.Ctx(t), e.stageReq(v, staging, c)); err == nil {
		t.Fatal("NodeStage survived --test-crash-at NodeStage:mapped")
	}
	e.p.Kill() // reap it (it killed itself)
	e.p.Without("--test-crash-at")
	e.p.Start()
	e.stage(v, staging, c)
	target := e.path("target")
	e.publish(v, staging, target, c, false)
	writeSynced(t, target+"/after-crash", []byte("ok"))
}

// Sixteen volumes staged at once all finish, each on a device of its own
// that holds its own data: per-volume locks, no global one, and no two
// stages sharing a mapping (the speed-up itself is measured by `make
// bench`, P7).
func TestSixteenVolumesStagedInParallel(t *testing.T) {
	e := setup(t)
	c := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	vols := make([]*csi.Volume, 16)
	for i := range vols {
		vols[i] = e.createVolume(fmt.Sprintf("parallel-%02d", i), 16*mib, c)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(vols))
	for i, v := range vols {
		staging := e.path(fmt.Sprintf("staging-%02d", i))
		harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.nc.NodeStageVolume(harness.Ctx(t), e.stageReq(v, staging, c))
		}()
		t.Cleanup(func() { e.unstage(v, staging) })
	}
	wg.Wait()
	for i, err := range errs {
		harness.Must(t, err, "stage volume %d", i)
	}
	// Every write first, every read after: two volumes on one device would
	// show the later write in the earlier volume.
	targets, sums := make([]string, len(vols)), make([]string, len(vols))
	for i, v := range vols {
		targets[i] = e.path(fmt.Sprintf("target-%02d", i))
		e.publish(v, e.path(fmt.Sprintf("staging-%02d", i)), targets[i], c, false)
		sums[i] = writeAt(t, targets[i], 0, pattern(4096, v.VolumeId))
	}
	for i := range vols {
		if got := readAt(t, targets[i], 0, 4096); got != sums[i] {
			t.Errorf("volume %d holds %s, wrote %s: another volume's stage shares its device", i, got, sums[i])
		}
	}
}
