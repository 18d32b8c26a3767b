package addons_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Resync flags a copy only when rbd-mirror, alive, reports it
// split-brained and the call has force. Asked on a healthy copy it says
// ready; on a state that may pass it says not ready and does nothing,
// force or not; on any other error, or a dead daemon, it says why.
func TestResync(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	_, err := e.resync(id, true)
	wantCode(t, err, codes.FailedPrecondition, "Resync of the primary")
	_, err = e.resync(e.volume("plain"), true)
	wantCode(t, err, codes.FailedPrecondition, "Resync of an image not mirrored")
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", false), "MakeNonPrimary")

	for _, tc := range []struct {
		what  string
		local rbd.MirrorSiteStatus
		ready bool
		code  codes.Code
	}{
		{"not reported on yet", rbd.MirrorSiteStatus{}, false, codes.OK},
		{"starting", rbd.MirrorSiteStatus{State: rbd.SiteStartingReplay, Up: true, Description: "starting replay"}, false, codes.OK},
		{"syncing", rbd.MirrorSiteStatus{State: rbd.SiteSyncing, Up: true, Description: "syncing 40%"}, false, codes.OK},
		{"replaying", localReplaying, true, codes.OK},
		{"another error", rbd.MirrorSiteStatus{State: rbd.SiteError, Up: true, Description: "failed to refresh remote image"}, false, codes.FailedPrecondition},
		{"a split-brain of a daemon that is down", rbd.MirrorSiteStatus{State: rbd.SiteError, Description: "split-brain", LastUpdate: time.Unix(1796284800, 0)}, false, codes.FailedPrecondition},
	} {
		e.status("vol", rbd.MirrorStatus{Local: tc.local, Peers: []rbd.MirrorSiteStatus{primaryPeer}})
		for _, force := range []bool{false, true} {
			ready, err := e.resync(id, force)
			if ready != tc.ready || (tc.code == codes.OK && err != nil) {
				t.Errorf("%s (force %v): ready %v, %v; want ready %v", tc.what, force, ready, err, tc.ready)
			}
			if tc.code != codes.OK {
				wantCode(t, err, tc.code, tc.what)
			}
			if e.ceph.ResyncRequested(e.pool, "vol") {
				t.Fatalf("%s (force %v): flagged for resync", tc.what, force)
			}
		}
	}

	e.status("vol", rbd.MirrorStatus{Local: localSplit, Peers: []rbd.MirrorSiteStatus{primaryPeer}})
	_, err = e.resync(id, false)
	wantCode(t, err, codes.FailedPrecondition, "Resync of a split-brain without force")
	if !strings.Contains(err.Error(), "force") || e.ceph.ResyncRequested(e.pool, "vol") {
		t.Fatalf("without force: %v, flagged %v", err, e.ceph.ResyncRequested(e.pool, "vol"))
	}
	ready, err := e.resync(id, true)
	if err != nil || ready || !e.ceph.ResyncRequested(e.pool, "vol") {
		t.Fatalf("Resync of a split-brain with force: ready %v, %v, flagged %v; want flagged, not ready", ready, err, e.ceph.ResyncRequested(e.pool, "vol"))
	}
	// Asked again before rbd-mirror acts (its report still says
	// split-brain), with or without force: under way, not ready.
	for _, force := range []bool{false, true} {
		if ready, err := e.resync(id, force); err != nil || ready {
			t.Errorf("Resync again (force %v) while flagged: ready %v, %v; want not ready", force, ready, err)
		}
	}
}
