package rbdtest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

func (s *suite) clone(parent, snap, name string, size uint64, meta map[string]string) {
	s.t.Helper()
	err := s.Backend.Clone(s.ctx(), s.Pool, s.Pool, name, rbd.CloneSpec{ParentImage: parent, ParentSnap: snap, DropMetadataPrefixes: []string{"rbdcsi."},
		ImageSpec: rbd.ImageSpec{Size: size, Features: []string{"layering"}, Metadata: meta}})
	s.must(err, "Clone "+name)
}

func (s *suite) snapNames(f rbd.Family) []string {
	var names []string
	for _, sn := range f.Snaps {
		names = append(names, sn.Name)
	}
	return names
}

// Snapshots: a taken name is ErrExists; the list is in creation order
// with the size at snapshot time; an image with snapshots is not removed
// (ErrHasSnapshots), and goes once they are gone.
func testSnapshots(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, 2*mib, nil)
	before := time.Now()
	s.must(b.CreateSnapshot(ctx, p, name, "one"), "CreateSnapshot one")
	s.wantErr(b.CreateSnapshot(ctx, p, name, "one"), "CreateSnapshot of a taken name", rbd.ErrExists)
	s.must(b.Resize(ctx, p, name, 4*mib), "Resize")
	s.must(b.CreateSnapshot(ctx, p, name, "two"), "CreateSnapshot two")
	f := s.family(name)
	if len(f.Snaps) != 2 || f.Snaps[0].Name != "one" || f.Snaps[1].Name != "two" || f.Snaps[0].Size != 2*mib || f.Snaps[1].Size != 4*mib {
		t.Fatalf("snapshots %+v, want one (2 MiB) then two (4 MiB)", f.Snaps)
	}
	if c := f.Snaps[0].Created; c.Before(before.Add(-time.Minute)) || c.After(time.Now().Add(time.Minute)) {
		t.Errorf("snapshot time %v is not about now", c)
	}
	s.wantErr(b.RemoveImage(ctx, p, name), "RemoveImage with snapshots", rbd.ErrHasSnapshots)
	if !s.listed(name) {
		t.Fatal("an image with snapshots was removed")
	}
	s.must(b.RemoveSnapshot(ctx, p, f.ID, "one"), "RemoveSnapshot one")
	s.wantErr(b.RemoveSnapshot(ctx, p, f.ID, "one"), "RemoveSnapshot again", rbd.ErrNotFound)
	if got := s.snapNames(s.family(name)); len(got) != 1 || got[0] != "two" {
		t.Fatalf("snapshots after removing one: %v", got)
	}
	s.must(b.RemoveSnapshot(ctx, p, f.ID, "two"), "RemoveSnapshot two")
	s.must(b.RemoveImage(ctx, p, name), "RemoveImage without snapshots")
}

// Every snapshot is listed, so the controller's count against its
// per-image limit (--max-snapshots-per-image) is exact.
func testManySnapshots(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, mib, nil)
	const n = 12
	for i := 0; i < n; i++ {
		s.must(b.CreateSnapshot(ctx, p, name, fmt.Sprintf("s%02d", i)), "CreateSnapshot")
	}
	got := s.snapNames(s.family(name))
	if len(got) != n {
		t.Fatalf("%d snapshots listed, want %d: %v", len(got), n, got)
	}
	for i, sn := range got {
		if sn != fmt.Sprintf("s%02d", i) {
			t.Fatalf("snapshots out of order: %v", got)
		}
	}
}

// A clone: the snapshot's size or the asked one if larger, the parent's
// metadata without the driver's own keys, then its own; its parent is
// named by pool, current image name, image ID and snapshot. A taken
// name is ErrExists.
func testClone(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	parent, child, big := s.name("parent"), s.name("child"), s.name("big")
	s.create(parent, 2*mib, map[string]string{"rbdcsi.name": "pvc-parent", "rbdcsi.depth": "3", "user": "kept"})
	s.must(b.CreateSnapshot(ctx, p, parent, "snap"), "CreateSnapshot")
	s.must(b.Resize(ctx, p, parent, 8*mib), "Resize the parent after the snapshot")
	s.clone(parent, "snap", child, 0, map[string]string{"rbdcsi.name": "pvc-child"})
	s.clone(parent, "snap", big, 6*mib, nil)

	info, err := b.Stat(ctx, p, child)
	s.must(err, "Stat of the clone")
	if want := map[string]string{"rbdcsi.name": "pvc-child", "user": "kept"}; info.Size != 2*mib || !maps.Equal(info.Metadata, want) {
		t.Fatalf("clone %+v, want 2 MiB (the snapshot's) and metadata %v", info, want)
	}
	if info, err := b.Stat(ctx, p, big); err != nil || info.Size != 6*mib {
		t.Fatalf("clone asked 6 MiB: %+v, %v", info, err)
	}
	pf := s.family(parent)
	f := s.family(child)
	if len(pf.Snaps) != 1 || pf.Snaps[0].ID == 0 {
		t.Fatalf("the parent's snapshots %+v, want one with an ID", pf.Snaps)
	}
	if f.Parent == nil || *f.Parent != (rbd.Parent{Pool: p.Name, Image: parent, ImageID: pf.ID, Snap: "snap", SnapID: pf.Snaps[0].ID}) {
		t.Fatalf("clone's parent %+v, want %s/%s (%s)@snap (#%d)", f.Parent, p.Name, parent, pf.ID, pf.Snaps[0].ID)
	}
	err = b.Clone(ctx, p, p, child, rbd.CloneSpec{ParentImage: parent, ParentSnap: "snap", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}})
	s.wantErr(err, "Clone onto a taken name", rbd.ErrExists)

	// A renamed parent (a deleted volume kept hidden) is named anew.
	hidden := s.name("hidden")
	s.must(b.Rename(ctx, p, parent, hidden), "Rename the parent")
	if f := s.family(child); f.Parent == nil || f.Parent.Image != hidden || f.Parent.ImageID != pf.ID {
		t.Fatalf("after the rename the clone's parent is %+v, want %s", f.Parent, hidden)
	}
}

// A snapshot deleted while clones need it leaves the user's list and is
// counted as trashed; the parent cannot be removed (ErrHasSnapshots)
// until the last clone is gone, which takes the snapshot along.
func testTrashedSnapshotFollowsLastClone(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	parent, c1, c2 := s.name("parent"), s.name("c1"), s.name("c2")
	s.create(parent, mib, nil)
	s.must(b.CreateSnapshot(ctx, p, parent, "snap"), "CreateSnapshot")
	s.clone(parent, "snap", c1, 0, nil)
	s.clone(parent, "snap", c2, 0, nil)
	id := s.family(parent).ID
	s.must(b.RemoveSnapshot(ctx, p, id, "snap"), "RemoveSnapshot with clones")
	if f := s.family(parent); len(f.Snaps) != 0 || f.TrashedSnaps != 1 {
		t.Fatalf("after deleting a snapshot with clones: snaps %v, trashed %d; want none and 1", f.Snaps, f.TrashedSnaps)
	}
	err := b.Clone(ctx, p, p, s.name("late"), rbd.CloneSpec{ParentImage: parent, ParentSnap: "snap", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}})
	s.wantErr(err, "Clone of a deleted snapshot", rbd.ErrNotFound)
	s.wantErr(b.RemoveImage(ctx, p, parent), "RemoveImage of a parent with clones", rbd.ErrHasSnapshots)
	if f := s.family(c1); f.Parent == nil || f.Parent.ImageID != id {
		t.Fatalf("the clone lost its parent: %+v", f.Parent)
	}
	s.must(b.RemoveImage(ctx, p, c1), "RemoveImage of the first clone")
	if f := s.family(parent); f.TrashedSnaps != 1 {
		t.Fatalf("trashed = %d with one clone left, want 1", f.TrashedSnaps)
	}
	s.must(b.RemoveImage(ctx, p, c2), "RemoveImage of the last clone")
	if f := s.family(parent); len(f.Snaps) != 0 || f.TrashedSnaps != 0 {
		t.Fatalf("after the last clone: snaps %v, trashed %d; want none", f.Snaps, f.TrashedSnaps)
	}
	s.must(b.RemoveImage(ctx, p, parent), "RemoveImage of the parent")
}

// Flatten detaches a clone, which takes a trashed parent snapshot along
// when it was the last; an image without a parent is ErrInvalid.
func testFlatten(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	parent, child := s.name("parent"), s.name("child")
	s.create(parent, mib, nil)
	s.must(b.CreateSnapshot(ctx, p, parent, "snap"), "CreateSnapshot")
	s.clone(parent, "snap", child, 0, map[string]string{"k": "v"})
	s.must(b.RemoveSnapshot(ctx, p, s.family(parent).ID, "snap"), "RemoveSnapshot with a clone")
	s.must(b.Flatten(ctx, p, child), "Flatten")
	if f := s.family(child); f.Parent != nil || f.Metadata["k"] != "v" || f.Size != mib {
		t.Fatalf("flattened clone %+v, want no parent and its own metadata and size", f)
	}
	if f := s.family(parent); f.TrashedSnaps != 0 || len(f.Snaps) != 0 {
		t.Fatalf("parent after the flatten: snaps %v, trashed %d; want none", f.Snaps, f.TrashedSnaps)
	}
	s.must(b.RemoveImage(ctx, p, parent), "RemoveImage of the parent")
	s.wantErr(b.Flatten(ctx, p, child), "Flatten of an image without a parent", rbd.ErrInvalid)
}

// Sparsify keeps what an image is (size, features, metadata, snapshots)
// and what a clone is (its parent); a missing image is ErrNotFound.
func testSparsify(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	parent, child := s.name("parent"), s.name("child")
	s.create(parent, 4*mib, map[string]string{"k": "v"})
	s.must(b.CreateSnapshot(ctx, p, parent, "snap"), "CreateSnapshot")
	before := s.family(parent)
	s.must(b.Sparsify(ctx, p, parent), "Sparsify")
	after := s.family(parent)
	if after.Size != before.Size || after.Metadata["k"] != "v" || !slices.Equal(after.Features, before.Features) || !slices.Equal(s.snapNames(after), []string{"snap"}) {
		t.Fatalf("sparsified image %+v, was %+v", after, before)
	}
	s.clone(parent, "snap", child, 0, nil)
	s.must(b.Sparsify(ctx, p, child), "Sparsify of a clone")
	if f := s.family(child); f.Parent == nil || f.Parent.ImageID != before.ID || f.Size != 4*mib {
		t.Fatalf("sparsified clone %+v, want its parent and size", f)
	}
	s.wantErr(b.Sparsify(ctx, p, s.name("missing")), "Sparsify of a missing image", rbd.ErrNotFound)
	s.must(b.RemoveImage(ctx, p, child), "RemoveImage of the clone")
	s.must(b.RemoveSnapshot(ctx, p, before.ID, "snap"), "RemoveSnapshot")
	s.must(b.RemoveImage(ctx, p, parent), "RemoveImage of the parent")
}

// A trashed snapshot whose clone detached without taking it along (two
// detaches racing) is not counted, and goes with its image.
func testCloneLessTrashedSnapshot(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	parent, child := s.name("parent"), s.name("child")
	s.create(parent, mib, nil)
	s.must(b.CreateSnapshot(ctx, p, parent, "snap"), "CreateSnapshot")
	s.clone(parent, "snap", child, 0, nil)
	s.must(b.RemoveSnapshot(ctx, p, s.family(parent).ID, "snap"), "RemoveSnapshot with a clone")
	s.DetachBehind(t, p, parent, child)
	if f := s.family(parent); f.TrashedSnaps != 0 || len(f.Snaps) != 0 {
		t.Fatalf("a cloneless trashed snapshot is counted: snaps %v, trashed %d", f.Snaps, f.TrashedSnaps)
	}
	if f := s.family(child); f.Parent != nil {
		t.Fatalf("the detached clone still names a parent: %+v", f.Parent)
	}
	s.must(b.RemoveImage(ctx, p, parent), "RemoveImage of the parent with a cloneless trashed snapshot")
	s.must(b.RemoveImage(ctx, p, child), "RemoveImage of the detached clone")
}
