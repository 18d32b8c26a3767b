package controller

import (
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// QoS limits set by ControllerModifyVolume reach a librbd client (here
// rbd-fuse) that has the image open: a write is capped at once, and
// uncapped again by the next change, measured as ratios to the uncapped
// rate of the same run.
func TestQoSReachesAMappedVolume(t *testing.T) {
	e := setupAttach(t)
	resp, err := e.create(t, "qos-live", 64*mib)
	harness.Must(t, err, "create")
	vol := resp.Volume
	defer e.delete(t, vol.VolumeId)
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	harness.Must(t, e.publish(t, vol.VolumeId, "node-a", rwo, false), "publish")
	defer e.unpublish(t, vol.VolumeId, "node-a")
	staging, err := os.MkdirTemp("", "rbdcsi-qos-")
	harness.Must(t, err, "staging dir")
	defer os.Remove(staging)
	harness.Must(t, e.stage(t, "node-a", vol, staging), "stage")
	defer e.unstage(t, "node-a", vol, staging)
	dir := staging // the filesystem's root

	modify := func(p map[string]string) {
		t.Helper()
		_, err := e.cc.ControllerModifyVolume(harness.Ctx(t), &csi.ControllerModifyVolumeRequest{VolumeId: vol.VolumeId, MutableParameters: p, Secrets: e.c.Secrets()})
		harness.Must(t, err, "ControllerModifyVolume %v", p)
	}
	const size = 4 * mib
	harness.TimedWrite(t, dir, size) // warm up: the first write allocates
	free := harness.TimedWrite(t, dir, size)
	modify(map[string]string{"maxBps": "1048576"})
	capped := harness.TimedWrite(t, dir, size)
	// For krbd, which ignores librbd's limits, the node gets them from the
	// publish context (a repeated publish answers with the current ones).
	pub, err := e.cc.ControllerPublishVolume(harness.Ctx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol.VolumeId, NodeId: "node-a", VolumeCapability: rwo, Secrets: e.c.Secrets()})
	harness.Must(t, err, "repeated publish")
	if got := pub.PublishContext["qos"]; got != "rbps=1048576 wbps=1048576 riops=0 wiops=0" {
		t.Errorf("publish context qos = %q, want the total limit on both directions", got)
	}
	modify(map[string]string{"maxBps": "0"})
	again := harness.TimedWrite(t, dir, size)
	t.Logf("4 MiB written and synced: %v uncapped, %v at 1 MiB/s (%.1fx), %v uncapped again", free, capped, float64(capped)/float64(free), again)
	// At 1 MiB/s, 4 MiB take 3 s or more; uncapped, milliseconds here. A
	// tenth of that gap still tells a cap from none on a busy machine.
	if capped < 10*free || capped < 10*again {
		t.Errorf("the 1 MiB/s cap did not slow the write down tenfold: %v capped against %v and %v uncapped", capped, free, again)
	}
}
