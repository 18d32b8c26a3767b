package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// health is the volume's conditions as "STATUS Reason" lines, each
// message checked to say what to do (it names the guide's section).
func (c *ctrl) health(t *testing.T, vol string) []string {
	t.Helper()
	resp, err := c.c.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: vol})
	must(t, err, "ControllerGetVolumeHealth")
	if got := resp.GetVolumeHealth().GetVolumeId(); got != vol {
		t.Fatalf("health of volume %q, asked for %q", got, vol)
	}
	return conditions(t, resp.GetVolumeHealth())
}

func conditions(t *testing.T, h *csi.VolumeHealth) []string {
	t.Helper()
	var out []string
	for _, e := range h.GetHealthStatuses() {
		if !strings.Contains(e.GetMessage(), "docs/operations.md#volume-health") {
			t.Errorf("%s %s: the message %q does not point to the guide", e.GetStatus(), e.GetReason(), e.GetMessage())
		}
		out = append(out, e.GetStatus().String()+" "+e.GetReason())
	}
	return out
}

func wantConditions(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("conditions %q, want %q", got, want)
	}
}

// Each fault of the pool or the image is reported while it lasts, and no
// longer; a healthy volume has none.
func TestVolumeHealthReportsPoolAndImageFaults(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{Credentials: ownCreds()})
	vol := c.mustCreate(t, "vol", nil)
	wantConditions(t, c.health(t, vol))

	e.ceph.SetNearFull(poolName, true)
	wantConditions(t, c.health(t, vol), "DEGRADED PoolNearFull")
	e.ceph.SetFull(poolName, true)
	wantConditions(t, c.health(t, vol), "INACCESSIBLE PoolFull")
	e.ceph.SetFull(poolName, false)
	e.ceph.SetNearFull(poolName, false)
	wantConditions(t, c.health(t, vol))
	e.ceph.SetInactivePGs(poolName, 8)
	wantConditions(t, c.health(t, vol), "INACCESSIBLE PlacementGroupsInactive")
	e.ceph.SetInactivePGs(poolName, 0)
	wantConditions(t, c.health(t, vol))

	must(t, c.ceph.RemoveImage(ctx(t), e.pool, imageOf(t, vol)), "removing the image behind the driver")
	wantConditions(t, c.health(t, vol), "INACCESSIBLE ImageMissing")
	// The listing finds only what the pool holds: the image is gone.
	list, err := c.c.ControllerListVolumeHealth(ctx(t), &csi.ControllerListVolumeHealthRequest{})
	must(t, err, "ControllerListVolumeHealth")
	if len(list.GetEntries()) != 0 {
		t.Fatalf("listed %v for a pool without volumes", list.GetEntries())
	}
}

// A node fenced off a volume is reported; an expired fence (Ceph dropped
// its entries) is not.
func TestVolumeHealthReportsAFencedNode(t *testing.T) {
	f := newFenceEnv(t, controller.Options{Credentials: ownCreds(), FenceExpiry: time.Hour})
	v := f.c.mustCreate(t, "vol", nil)
	f.publish(t, v, "node-a", accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), false)
	f.mapOn(t, v)
	must(t, f.unpublish(t, v, "node-a"), "force detach")
	wantConditions(t, f.c.health(t, v), "DEGRADED NodeFenced")
	must(t, f.reg.AddFence(ctx(t), "node-b", v, nodereg.Fence{Addrs: []string{"192.0.2.9:0/1"}, Expires: time.Now().Add(-time.Minute)}), "an expired fence of node-b")
	wantConditions(t, f.c.health(t, v), "DEGRADED NodeFenced")
}

// Mirroring is reported when rbd-mirror says the copies diverged or a
// daemon stopped, not while a replay starts.
func TestVolumeHealthReportsMirroring(t *testing.T) {
	e := newEnv(t)
	e.ceph.SetPoolMirrorMode(poolName, "image")
	c := e.start("", controller.Options{Credentials: ownCreds()})
	vol := c.mustCreate(t, "vol", nil)
	image := imageOf(t, vol)
	must(t, c.ceph.EnableMirroring(ctx(t), e.pool, image), "EnableMirroring")
	peer := func(state, desc string, up bool) rbd.MirrorStatus {
		return rbd.MirrorStatus{Local: rbd.MirrorSiteStatus{State: rbd.SiteStopped, Up: true, Description: "local image is primary"},
			Peers: []rbd.MirrorSiteStatus{{MirrorUUID: "peer", State: state, Up: up, Description: desc, LastUpdate: time.Now()}}}
	}
	for _, tc := range []struct {
		st   rbd.MirrorStatus
		want []string
	}{
		{peer(rbd.SiteStartingReplay, "starting replay", true), nil},
		{peer(rbd.SiteReplaying, "replaying", true), nil},
		{peer(rbd.SiteError, "split-brain", true), []string{"DEGRADED MirrorSplitBrain"}},
		// The peer's copy was promoted too (a failover), and its daemon
		// says so after this copy became primary.
		{peer(rbd.SiteStopped, "local image is primary", true), []string{"DEGRADED MirrorSplitBrain"}},
		{peer(rbd.SiteError, "failed to open local image", true), []string{"DEGRADED MirrorError"}},
		{peer(rbd.SiteReplaying, "replaying", false), []string{"DEGRADED MirrorNotSyncing"}},
	} {
		must(t, e.ceph.SetMirrorStatus(e.pool, image, tc.st), "SetMirrorStatus")
		wantConditions(t, c.health(t, vol), tc.want...)
	}
	// The listing reports the volume with its condition, and pages.
	other := c.mustCreate(t, "other", nil)
	must(t, c.ceph.EnableMirroring(ctx(t), e.pool, imageOf(t, other)), "EnableMirroring")
	must(t, e.ceph.SetMirrorStatus(e.pool, imageOf(t, other), peer(rbd.SiteError, "split-brain", true)), "SetMirrorStatus")
	var listed []string
	token := ""
	for range 3 {
		resp, err := c.c.ControllerListVolumeHealth(ctx(t), &csi.ControllerListVolumeHealthRequest{MaxEntries: 1, StartingToken: token})
		must(t, err, "ControllerListVolumeHealth")
		for _, h := range resp.GetEntries() {
			listed = append(listed, h.GetVolumeId()+" "+strings.Join(conditions(t, h), ","))
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	if len(listed) != 2 || !strings.Contains(strings.Join(listed, "\n"), vol+" DEGRADED MirrorNotSyncing") ||
		!strings.Contains(strings.Join(listed, "\n"), other+" DEGRADED MirrorSplitBrain") {
		t.Fatalf("listed %q, want both volumes with their conditions", listed)
	}
}

// Bad requests get a clear status.
func TestVolumeHealthBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{Credentials: ownCreds()})
	_, err := c.c.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{})
	wantCode(t, err, codes.InvalidArgument, "no volume ID")
	_, err = c.c.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: "not-ours"})
	wantCode(t, err, codes.NotFound, "a volume ID not of this driver")
	_, err = c.c.ControllerListVolumeHealth(ctx(t), &csi.ControllerListVolumeHealthRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument, "negative max_entries")
	_, err = c.c.ControllerListVolumeHealth(ctx(t), &csi.ControllerListVolumeHealthRequest{StartingToken: "junk"})
	wantCode(t, err, codes.Aborted, "a token not of this driver")
	none := e.start("", controller.Options{})
	_, err = none.c.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: "x"})
	wantCode(t, err, codes.Unimplemented, "without controller credentials")
}
