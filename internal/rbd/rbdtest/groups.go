package rbdtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// cloneByID clones the snapshot of parent with the given ID.
func (s *suite) cloneByID(parent string, snapID uint64, name string) error {
	return s.Backend.Clone(s.ctx(), s.Pool, s.Pool, name, rbd.CloneSpec{ParentImage: parent, ParentSnapID: snapID,
		ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}})
}

func (s *suite) groups() []string {
	s.t.Helper()
	names, err := s.Backend.ListGroups(s.ctx(), s.Pool)
	s.must(err, "ListGroups")
	if !slices.IsSorted(names) {
		s.t.Errorf("ListGroups is not sorted: %v", names)
	}
	return names
}

// Group snapshots. A backend whose library lacks them says so, and so does
// every call that needs them. Otherwise: an image is in one group at most
// (adding it again to its own is fine) and is not removed while in one
// (ErrBusy); a group snapshot takes one snapshot of each image, not in
// the user's list but counted with the trashed ones (the image is not
// removed: ErrHasSnapshots), and taking it again returns it; each clones
// by snapshot ID at the size it was taken at. Removing the group takes
// its snapshots along, except those clones still need, which move to the
// trash namespace until the last clone goes: the image cannot be removed
// before.
func testGroupSnapshots(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	g, other := s.name("g"), s.name("other")
	if unsupported := b.GroupSnapshots(); unsupported != nil {
		s.wantErr(unsupported, "GroupSnapshots", rbd.ErrNotSupported)
		img := s.name("img")
		s.create(img, mib, nil)
		s.wantErr(b.CreateGroup(ctx, p, g), "CreateGroup", rbd.ErrNotSupported)
		s.wantErr(b.AddToGroup(ctx, p, g, img), "AddToGroup", rbd.ErrNotSupported)
		_, err := b.SnapshotGroup(ctx, p, g, "gs")
		s.wantErr(err, "SnapshotGroup", rbd.ErrNotSupported)
		s.wantErr(b.RemoveGroup(ctx, p, g), "RemoveGroup", rbd.ErrNotSupported)
		_, err = b.ListGroups(ctx, p)
		s.wantErr(err, "ListGroups", rbd.ErrNotSupported)
		s.must(b.CreateSnapshot(ctx, p, img, "snap"), "CreateSnapshot")
		s.wantErr(s.cloneByID(img, 1, s.name("clone")), "Clone by ParentSnapID", rbd.ErrNotSupported)
		if s.listed(s.name("clone")) {
			t.Error("a clone by snapshot ID was made without support")
		}
		t.Skipf("the backend's Ceph library lacks group snapshots: %v", unsupported)
	}

	images := []string{s.name("a"), s.name("b"), s.name("c")}
	for i, n := range images {
		s.create(n, uint64(i+1)*mib, nil)
	}
	s.wantErr(b.AddToGroup(ctx, p, g, images[0]), "AddToGroup of a missing group", rbd.ErrNotFound)
	s.must(b.CreateGroup(ctx, p, g), "CreateGroup")
	s.wantErr(b.CreateGroup(ctx, p, g), "CreateGroup of a taken name", rbd.ErrExists)
	s.wantErr(b.AddToGroup(ctx, p, g, s.name("missing")), "AddToGroup of a missing image", rbd.ErrNotFound)
	for _, n := range images {
		s.must(b.AddToGroup(ctx, p, g, n), "AddToGroup "+n)
	}
	s.must(b.AddToGroup(ctx, p, g, images[0]), "AddToGroup of a member again")
	s.must(b.CreateGroup(ctx, p, other), "CreateGroup of a second group")
	err := b.AddToGroup(ctx, p, other, images[1])
	s.wantErr(err, "AddToGroup of another group's image", rbd.ErrExists)
	if err != nil && !strings.Contains(err.Error(), g) {
		t.Errorf("AddToGroup of another group's image does not name that group (%s): %v", g, err)
	}
	if got := s.groups(); !slices.Contains(got, g) || !slices.Contains(got, other) {
		t.Errorf("ListGroups %v lacks %s or %s", got, g, other)
	}
	s.wantErr(b.RemoveImage(ctx, p, images[2]), "RemoveImage of an image in a group", rbd.ErrBusy)

	_, err = b.SnapshotGroup(ctx, p, s.name("missing"), "gs")
	s.wantErr(err, "SnapshotGroup of a missing group", rbd.ErrNotFound)
	gs, err := b.SnapshotGroup(ctx, p, g, "gs")
	s.must(err, "SnapshotGroup")
	if len(gs.Members) != len(images) {
		t.Fatalf("group snapshot members %+v, want one of each of %v", gs.Members, images)
	}
	ids := map[uint64]bool{}
	for i, m := range gs.Members {
		if m.Image != images[i] || m.SnapID == 0 || ids[m.SnapID] {
			t.Fatalf("group snapshot members %+v, want %v in order with distinct snapshot IDs", gs.Members, images)
		}
		ids[m.SnapID] = true
	}
	again, err := b.SnapshotGroup(ctx, p, g, "gs")
	s.must(err, "SnapshotGroup again")
	if !slices.Equal(again.Members, gs.Members) {
		t.Fatalf("SnapshotGroup again: %+v, want the first one's %+v", again.Members, gs.Members)
	}
	for _, n := range images {
		if f := s.family(n); len(f.Snaps) != 0 || f.TrashedSnaps != 1 {
			t.Fatalf("%s with a group snapshot: snaps %v, trashed %d; want none and 1 (the group's)", n, f.Snaps, f.TrashedSnaps)
		}
	}
	s.wantErr(b.RemoveImage(ctx, p, images[2]), "RemoveImage of an image with a group snapshot", rbd.ErrHasSnapshots)
	if !s.listed(images[2]) {
		t.Fatal("an image with a group snapshot was removed")
	}

	// The snapshot keeps its size: the clones have the sizes taken.
	s.must(b.Resize(ctx, p, images[0], 8*mib), "Resize after the group snapshot")
	clones := map[string]string{}
	for i, m := range gs.Members {
		clone := s.name("clone-" + string(rune('a'+i)))
		clones[m.Image] = clone
		s.must(s.cloneByID(m.Image, m.SnapID, clone), "Clone of "+m.Image+" by ParentSnapID")
		f := s.family(clone)
		want := s.family(m.Image)
		if f.Parent == nil || f.Parent.Image != m.Image || f.Parent.ImageID != want.ID || f.Parent.Pool != p.Name || f.Parent.Snap == "" {
			t.Fatalf("clone %s's parent %+v, want %s/%s (%s) at a named snapshot", clone, f.Parent, p.Name, m.Image, want.ID)
		}
		if f.Size != uint64(i+1)*mib {
			t.Errorf("clone %s of %s: %d bytes, want the snapshot's %d", clone, m.Image, f.Size, uint64(i+1)*mib)
		}
	}
	s.wantErr(s.cloneByID(images[0], 1<<40, s.name("clone-x")), "Clone of a missing snapshot ID", rbd.ErrNotFound)

	s.must(b.RemoveGroup(ctx, p, g), "RemoveGroup")
	s.must(b.RemoveGroup(ctx, p, g), "RemoveGroup again")
	s.must(b.RemoveGroup(ctx, p, other), "RemoveGroup of the empty group")
	if got := s.groups(); slices.Contains(got, g) || slices.Contains(got, other) {
		t.Errorf("ListGroups after RemoveGroup: %v", got)
	}
	a := images[0]
	if f := s.family(a); len(f.Snaps) != 0 || f.TrashedSnaps != 1 {
		t.Fatalf("%s after RemoveGroup, its clone alive: snaps %v, trashed %d; want none and 1", a, f.Snaps, f.TrashedSnaps)
	}
	if f := s.family(clones[a]); f.Parent == nil || f.Parent.Image != a {
		t.Fatalf("the clone lost its parent with the group: %+v", f.Parent)
	}
	s.wantErr(b.RemoveImage(ctx, p, a), "RemoveImage of a parent whose trashed group snapshot has a clone", rbd.ErrHasSnapshots)
	s.must(b.RemoveImage(ctx, p, clones[a]), "RemoveImage of the clone")
	if f := s.family(a); len(f.Snaps) != 0 || f.TrashedSnaps != 0 {
		t.Fatalf("%s after its clone went: snaps %v, trashed %d; want none", a, f.Snaps, f.TrashedSnaps)
	}
	s.must(b.RemoveImage(ctx, p, a), "RemoveImage of the parent after its clone")
}
