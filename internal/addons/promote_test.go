package addons_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Promote of the primary changes nothing; of a copy whose peer's
// demotion arrived, it promotes and sets the class's schedule on it (the
// copy's own: the mgr keys schedules by image ID).
func TestPromote(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	snaps := e.ceph.MirrorSnapshots(e.pool, "vol")
	must(t, e.promote(id, false, nil), "Promote of the primary")
	if e.ceph.MirrorSnapshots(e.pool, "vol") != snaps || !e.info("vol").Primary {
		t.Fatal("a promote of the primary changed it")
	}
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", true), "MakeNonPrimary (demotion arrived)")
	must(t, e.promote(id, false, map[string]string{"schedulingInterval": "10m"}), "Promote")
	if !e.info("vol").Primary || !slices.Equal(e.schedules("vol"), []rbd.MirrorSchedule{{Interval: "10m"}}) {
		t.Fatalf("after promote: %+v, schedules %v", e.info("vol"), e.schedules("vol"))
	}
	wantCode(t, e.promote(e.volume("plain"), false, nil), codes.FailedPrecondition, "Promote of an image not mirrored")
	wantCode(t, e.promote(id, false, map[string]string{"mirroringMode": "journal"}), codes.InvalidArgument, "Promote with a bad class")
}

// A copy whose peer did not demote: while the peer's daemon reports, the
// peer is reachable and the answer is Unavailable (the csi-addons
// controller retries it as it is, never forcing); a forced promote over a
// live primary is refused; once no peer reports, FailedPrecondition says
// force is needed, and force promotes.
func TestPromoteWithoutDemotion(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", false), "MakeNonPrimary")
	e.status("vol", rbd.MirrorStatus{Local: localReplaying, Peers: []rbd.MirrorSiteStatus{primaryPeer}})
	err := e.promote(id, false, nil)
	wantCode(t, err, codes.Unavailable, "Promote while the peer is primary and alive")
	err = e.promote(id, true, nil)
	wantCode(t, err, codes.FailedPrecondition, "a forced promote over a live primary")
	if !strings.Contains(err.Error(), "refusing to force") {
		t.Errorf("the refusal does not say it refused to force: %v", err)
	}
	if e.info("vol").Primary {
		t.Fatal("promoted over a live primary")
	}

	e.status("vol", rbd.MirrorStatus{Local: localReplaying, Peers: []rbd.MirrorSiteStatus{downPeer}})
	err = e.promote(id, false, nil)
	wantCode(t, err, codes.FailedPrecondition, "Promote with the peer cut off")
	if !strings.Contains(err.Error(), "needs force") || !strings.Contains(err.Error(), "taken at 2026-") {
		t.Errorf("the refusal does not say force is needed and what the copy holds: %v", err)
	}
	if e.info("vol").Primary {
		t.Fatal("promoted without force")
	}
	must(t, e.promote(id, true, nil), "Promote with force")
	if !e.info("vol").Primary {
		t.Fatal("not promoted")
	}
}

// A copy into which rbd-mirror is writing a sync (librbd refuses its
// promote with EROFS) is reachable from its peer, whatever the peer's
// daemon last reported: Unavailable, never the FailedPrecondition on which
// the csi-addons controller would force the promote and drop what the
// sync carries. Once the sync is written, the promote succeeds.
func TestPromoteWhileASyncIsWritten(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", true), "MakeNonPrimary")
	must(t, e.ceph.SetMirrorSyncing(e.pool, "vol", true), "SetMirrorSyncing")
	e.status("vol", rbd.MirrorStatus{Local: localReplaying, Peers: []rbd.MirrorSiteStatus{downPeer}})
	err := e.promote(id, false, nil)
	wantCode(t, err, codes.Unavailable, "Promote while a sync is written into the copy, the peer's report down")
	if e.info("vol").Primary {
		t.Fatal("promoted during a sync")
	}
	must(t, e.ceph.SetMirrorSyncing(e.pool, "vol", false), "SetMirrorSyncing")
	must(t, e.promote(id, false, nil), "Promote once the sync is written")
	if !e.info("vol").Primary {
		t.Fatal("not promoted")
	}
}

// A copy this site demoted, to which nothing has arrived from the peer
// since, is not promoted without force, though librbd would: the peer may
// have been promoted and written meanwhile, and its demotion, carrying
// those writes, is still on its way. Unavailable while the peer's daemon
// reports (wait for it), FailedPrecondition once it does not.
func TestPromoteOfACopyDemotedHere(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	must(t, e.demote(id), "Demote")
	if !e.info("vol").DemotedHere {
		t.Fatal("a demoted copy is not DemotedHere")
	}
	e.status("vol", rbd.MirrorStatus{Local: localReplaying, Peers: []rbd.MirrorSiteStatus{replayingPeer}})
	wantCode(t, e.promote(id, false, nil), codes.Unavailable, "Promote of a copy demoted here, the peer alive")
	if e.info("vol").Primary {
		t.Fatal("promoted with this site's old data")
	}
	e.status("vol", rbd.MirrorStatus{Local: localReplaying, Peers: []rbd.MirrorSiteStatus{downPeer}})
	wantCode(t, e.promote(id, false, nil), codes.FailedPrecondition, "Promote of a copy demoted here, the peer gone")
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", true), "the peer's demotion arriving")
	must(t, e.promote(id, false, nil), "Promote once the peer's demotion arrived")
}
