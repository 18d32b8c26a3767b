package rbdtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// What one site shows of snapshot-based mirroring, in a pool mirrored
// image by image with no peer: enable, mirror snapshots, demote and
// promote, disable; each call repeated changes nothing; an image not
// mirrored is ErrNotMirrored to every call that needs mirroring, and a
// wrong state is refused, never acted on.
func testMirroring(t *testing.T, s *suite) {
	b, p, name := s.Backend, s.Pool, s.name("img")
	s.create(name, 4*mib, nil)
	info, err := b.MirrorInfo(s.ctx(), p, name)
	s.must(err, "MirrorInfo")
	if info.Enabled() || info.State != rbd.MirrorDisabled {
		t.Fatalf("a new image's mirroring: %+v, want disabled", info)
	}
	if f := s.family(name); f.Mirror != nil {
		t.Fatalf("StatFamily of an image not mirrored says %+v", f.Mirror)
	}
	s.wantErr(b.PromoteImage(s.ctx(), p, name, false), "PromoteImage of an image not mirrored", rbd.ErrNotMirrored)
	s.wantErr(b.DemoteImage(s.ctx(), p, name), "DemoteImage of an image not mirrored", rbd.ErrNotMirrored)
	s.wantErr(b.ResyncImage(s.ctx(), p, name), "ResyncImage of an image not mirrored", rbd.ErrNotMirrored)
	_, err = b.MirrorSnapshot(s.ctx(), p, name)
	s.wantErr(err, "MirrorSnapshot of an image not mirrored", rbd.ErrNotMirrored)
	_, err = b.MirrorStatus(s.ctx(), p, name)
	s.wantErr(err, "MirrorStatus of an image not mirrored", rbd.ErrNotMirrored)
	s.must(b.DisableMirroring(s.ctx(), p, name), "DisableMirroring of an image not mirrored")
	s.wantErr(b.EnableMirroring(s.ctx(), p, s.name("nothing")), "EnableMirroring of a missing image", rbd.ErrNotFound)

	s.must(b.EnableMirroring(s.ctx(), p, name), "EnableMirroring")
	s.must(b.EnableMirroring(s.ctx(), p, name), "EnableMirroring again")
	info, err = b.MirrorInfo(s.ctx(), p, name)
	s.must(err, "MirrorInfo")
	if !info.Enabled() || info.Mode != rbd.MirrorModeSnapshot || !info.Primary || info.GlobalID == "" || info.DemotedHere {
		t.Fatalf("mirroring after enable: %+v, want enabled, snapshot mode, primary, with a global ID", info)
	}
	if since := time.Since(info.PrimarySince); since < -time.Minute || since > time.Minute {
		t.Errorf("primary since %v, want about now", info.PrimarySince)
	}
	enabled := info.PrimarySince
	// With no peer to send it to, librbd takes no mirror snapshot (the
	// two-site suite, e2e/dr, takes them).
	_, err = b.MirrorSnapshot(s.ctx(), p, name)
	s.wantErr(err, "MirrorSnapshot in a pool without peers", rbd.ErrNotMirrored)
	// Mirror snapshots (enable took one) are RBD's: no user snapshot,
	// nothing that keeps the image from being removed.
	f := s.family(name)
	if f.Mirror == nil || !f.Mirror.Primary || f.Mirror.GlobalID != info.GlobalID || len(f.Snaps) != 0 || f.TrashedSnaps != 0 {
		t.Fatalf("StatFamily of a mirrored image: mirror %+v, snapshots %v, %d trashed; want the primary, none", f.Mirror, f.Snaps, f.TrashedSnaps)
	}
	st, err := b.MirrorStatus(s.ctx(), p, name)
	s.must(err, "MirrorStatus")
	if st.Local.SplitBrain() || len(st.Peers) != 0 {
		t.Errorf("status without peers or daemons: %+v", st)
	}
	s.wantErr(b.ResyncImage(s.ctx(), p, name), "ResyncImage of the primary", rbd.ErrInvalid)
	s.must(b.PromoteImage(s.ctx(), p, name, false), "PromoteImage of the primary")

	s.must(b.DemoteImage(s.ctx(), p, name), "DemoteImage")
	s.must(b.DemoteImage(s.ctx(), p, name), "DemoteImage again")
	if info, err = b.MirrorInfo(s.ctx(), p, name); err != nil || info.Primary || !info.Enabled() || !info.DemotedHere || !info.PrimarySince.IsZero() {
		t.Fatalf("after demote: %+v %v, want enabled, not primary, demoted here", info, err)
	}
	if f := s.family(name); f.Mirror == nil || f.Mirror.Primary {
		t.Fatalf("StatFamily after demote: %+v", f.Mirror)
	}
	_, err = b.MirrorSnapshot(s.ctx(), p, name)
	s.wantErr(err, "MirrorSnapshot of a demoted copy", rbd.ErrInvalid)
	s.wantErr(b.DisableMirroring(s.ctx(), p, name), "DisableMirroring of a non-primary copy", rbd.ErrInvalid)
	if info, err = b.MirrorInfo(s.ctx(), p, name); err != nil || !info.Enabled() || info.ResyncRequested {
		t.Fatalf("a refused disable changed the mirroring: %+v %v", info, err)
	}
	// A non-primary copy is flagged for rbd-mirror to replace (none runs
	// here to do it).
	s.must(b.ResyncImage(s.ctx(), p, name), "ResyncImage of the demoted copy")
	if info, err = b.MirrorInfo(s.ctx(), p, name); err != nil || !info.ResyncRequested {
		t.Fatalf("after a resync request: %+v %v", info, err)
	}
	// Demoted here and no peer promoted since: librbd's orphan copy,
	// which takes a promote without force.
	s.must(b.PromoteImage(s.ctx(), p, name, false), "PromoteImage of the demoted copy")
	if info, err = b.MirrorInfo(s.ctx(), p, name); err != nil || !info.Primary || info.DemotedHere || info.PrimarySince.Before(enabled) {
		t.Fatalf("after promote: %+v %v, want primary since the promote", info, err)
	}
	s.must(b.DisableMirroring(s.ctx(), p, name), "DisableMirroring")
	s.must(b.DisableMirroring(s.ctx(), p, name), "DisableMirroring again")
	if info, err = b.MirrorInfo(s.ctx(), p, name); err != nil || info.Enabled() {
		t.Fatalf("after disable: %+v %v", info, err)
	}
	if f := s.family(name); f.Mirror != nil || len(f.Snaps) != 0 {
		t.Fatalf("StatFamily after disable: mirror %+v, snapshots %v", f.Mirror, f.Snaps)
	}
	s.must(b.RemoveImage(s.ctx(), p, name), "RemoveImage after mirroring")
}

// A clone cannot be mirrored while its parent is not: the peer would have
// no parent data to read through.
func testMirroringAClone(t *testing.T, s *suite) {
	b, p := s.Backend, s.Pool
	parent, clone := s.name("parent"), s.name("clone")
	s.create(parent, mib, nil)
	s.must(b.CreateSnapshot(s.ctx(), p, parent, "snap"), "CreateSnapshot")
	s.must(b.Clone(s.ctx(), p, p, clone, rbd.CloneSpec{ParentImage: parent, ParentSnap: "snap", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}}), "Clone")
	s.wantErr(b.EnableMirroring(s.ctx(), p, clone), "EnableMirroring of a clone of a parent not mirrored", rbd.ErrInvalid)
	if info, err := b.MirrorInfo(s.ctx(), p, clone); err != nil || info.Enabled() {
		t.Fatalf("a refused enable left %+v %v", info, err)
	}
	s.must(b.Flatten(s.ctx(), p, clone), "Flatten")
	s.must(b.EnableMirroring(s.ctx(), p, clone), "EnableMirroring of the flattened clone")
	s.must(b.DisableMirroring(s.ctx(), p, clone), "DisableMirroring")
}

// An image's mirror snapshot schedules: added once however often asked,
// listed, removed; a malformed one refused before it reaches Ceph.
func testMirrorSchedules(t *testing.T, s *suite) {
	b, p, name := s.Backend, s.Pool, s.name("img")
	s.create(name, mib, nil)
	s.must(b.EnableMirroring(s.ctx(), p, name), "EnableMirroring")
	list := func(what string) []rbd.MirrorSchedule {
		t.Helper()
		got, err := b.MirrorSchedules(s.ctx(), p, name)
		s.must(err, "MirrorSchedules "+what)
		return got
	}
	intervals := func(l []rbd.MirrorSchedule) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.Interval)
		}
		slices.Sort(out)
		return out
	}
	// The mgr loads rbd_support after it starts: until then the
	// schedules are unavailable, which is all a fresh cluster may say. A
	// mgr that cannot load it at all (Debian trixie's Reef loads no Python
	// module: "PyO3 modules do not yet support subinterpreters") has none.
	var fresh []rbd.MirrorSchedule
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		fresh, err = b.MirrorSchedules(s.ctx(), p, name)
		if errors.Is(err, rbd.ErrUnavailable) && time.Now().After(deadline) {
			t.Skipf("the mgr's rbd_support module is not loaded a minute on: %v", err)
		}
		if !errors.Is(err, rbd.ErrUnavailable) {
			s.must(err, "MirrorSchedules of a new image")
			break
		}
		time.Sleep(time.Second)
	}
	if len(fresh) != 0 {
		t.Fatalf("a new image has schedules %v", fresh)
	}
	hourly := rbd.MirrorSchedule{Interval: "1h"}
	s.must(b.AddMirrorSchedule(s.ctx(), p, name, hourly), "AddMirrorSchedule")
	s.must(b.AddMirrorSchedule(s.ctx(), p, name, hourly), "AddMirrorSchedule again")
	if got := intervals(list("after an add")); !slices.Equal(got, []string{"1h"}) {
		t.Fatalf("schedules %v, want one of 1h", got)
	}
	s.must(b.AddMirrorSchedule(s.ctx(), p, name, rbd.MirrorSchedule{Interval: "30m", StartTime: "14:00"}), "AddMirrorSchedule with a start time")
	got := list("after two adds")
	if iv := intervals(got); !slices.Equal(iv, []string{"1h", "30m"}) {
		t.Fatalf("schedules %v, want 1h and 30m", got)
	}
	for _, bad := range []rbd.MirrorSchedule{{Interval: "1w"}, {Interval: ""}, {Interval: "0m"}, {Interval: "5m", StartTime: "25:00"}, {Interval: "5m", StartTime: "now; rm"}} {
		s.wantErr(b.AddMirrorSchedule(s.ctx(), p, name, bad), "AddMirrorSchedule "+bad.String(), rbd.ErrInvalid)
	}
	for _, sc := range got {
		s.must(b.RemoveMirrorSchedule(s.ctx(), p, name, sc), "RemoveMirrorSchedule "+sc.String())
	}
	s.must(b.RemoveMirrorSchedule(s.ctx(), p, name, hourly), "RemoveMirrorSchedule of a missing one")
	if got := list("after the removals"); len(got) != 0 {
		t.Fatalf("schedules left: %v", got)
	}
	s.must(b.DisableMirroring(s.ctx(), p, name), "DisableMirroring")
}
