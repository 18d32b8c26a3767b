package rbdtest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

const mib = 1 << 20

// An image is created with its metadata and read back; a second create of
// the name is ErrExists and leaves the first untouched (the controller's
// idempotency rests on this).
func testCreateStatAndExists(t *testing.T, s *suite) {
	name := s.name("img")
	meta := map[string]string{"rbdcsi.name": "pvc-1", "other": "x"}
	s.create(name, 4*mib, meta)
	info, err := s.Backend.Stat(s.ctx(), s.Pool, name)
	s.must(err, "Stat")
	if info.Name != name || info.Size != 4*mib || info.ID == "" || !maps.Equal(info.Metadata, meta) || !slices.Equal(info.Features, []string{"layering"}) {
		t.Fatalf("Stat = %+v, want %s of 4 MiB with an ID, metadata %v and the feature layering", info, name, meta)
	}
	if !s.listed(name) {
		t.Fatalf("ListImages does not list %s", name)
	}
	err = s.Backend.CreateImage(s.ctx(), s.Pool, name, rbd.ImageSpec{Size: 8 * mib, Metadata: map[string]string{"rbdcsi.name": "pvc-2"}})
	s.wantErr(err, "second CreateImage", rbd.ErrExists)
	again, err := s.Backend.Stat(s.ctx(), s.Pool, name)
	s.must(err, "Stat after the second create")
	if again.Size != 4*mib || again.ID != info.ID || !maps.Equal(again.Metadata, meta) {
		t.Fatalf("the second create changed the image: %+v", again)
	}
	f := s.family(name)
	if f.ID != info.ID || f.Parent != nil || len(f.Snaps) != 0 || f.TrashedSnaps != 0 || f.Watchers != 0 {
		t.Fatalf("StatFamily of a new image = %+v", f)
	}
	if since := time.Since(f.Created); since < -time.Minute || since > time.Minute {
		t.Errorf("creation time %v is not about now", f.Created)
	}
	byID, err := s.Backend.StatFamily(s.ctx(), s.Pool, "", info.ID)
	s.must(err, "StatFamily by ID")
	if byID.Name != name || byID.Size != 4*mib {
		t.Fatalf("StatFamily by ID = %+v, want the image %s", byID, name)
	}
}

// What is not there is ErrNotFound, for every call that names an image.
func testMissingImage(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("nothing")
	_, err := b.Stat(ctx, p, name)
	s.wantErr(err, "Stat", rbd.ErrNotFound)
	_, err = b.StatFamily(ctx, p, name, "")
	s.wantErr(err, "StatFamily by name", rbd.ErrNotFound)
	_, err = b.StatFamily(ctx, p, "", "0123456789ab")
	s.wantErr(err, "StatFamily by ID", rbd.ErrNotFound)
	s.wantErr(b.Resize(ctx, p, name, mib), "Resize", rbd.ErrNotFound)
	s.wantErr(b.RemoveImage(ctx, p, name), "RemoveImage", rbd.ErrNotFound)
	s.wantErr(b.SetMetadata(ctx, p, name, map[string]string{"k": "v"}), "SetMetadata", rbd.ErrNotFound)
	s.wantErr(b.RemoveMetadata(ctx, p, name, "k"), "RemoveMetadata", rbd.ErrNotFound)
	s.wantErr(b.Rename(ctx, p, name, s.name("other")), "Rename", rbd.ErrNotFound)
	s.wantErr(b.Flatten(ctx, p, name), "Flatten", rbd.ErrNotFound)
	s.wantErr(b.CreateSnapshot(ctx, p, name, "s"), "CreateSnapshot", rbd.ErrNotFound)
	s.wantErr(b.RemoveSnapshot(ctx, p, "0123456789ab", "s"), "RemoveSnapshot of a missing image", rbd.ErrNotFound)
	err = b.Clone(ctx, p, p, s.name("clone"), rbd.CloneSpec{ParentImage: name, ParentSnap: "s", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}})
	s.wantErr(err, "Clone of a missing image", rbd.ErrNotFound)

	s.create(s.name("img"), mib, nil)
	f := s.family(s.name("img"))
	s.wantErr(b.RemoveSnapshot(ctx, p, f.ID, "nosnap"), "RemoveSnapshot of a missing snapshot", rbd.ErrNotFound)
	err = b.Clone(ctx, p, p, s.name("clone"), rbd.CloneSpec{ParentImage: s.name("img"), ParentSnap: "nosnap", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}})
	s.wantErr(err, "Clone of a missing snapshot", rbd.ErrNotFound)
	if s.listed(s.name("clone")) {
		t.Fatal("a failed clone left an image")
	}
}

// A missing pool is ErrPoolNotFound; a create in a RADOS namespace never
// made says so too (the controller answers InvalidArgument naming it).
func testMissingPoolAndNamespace(t *testing.T, s *suite) {
	b, ctx := s.Backend, s.ctx()
	nopool := s.Pool
	nopool.Name = "contract-no-such-pool"
	s.wantErr(b.CreateImage(ctx, nopool, s.name("img"), rbd.ImageSpec{Size: mib}), "CreateImage", rbd.ErrPoolNotFound)
	_, err := b.Stat(ctx, nopool, s.name("img"))
	s.wantErr(err, "Stat", rbd.ErrPoolNotFound)
	_, err = b.StatFamily(ctx, nopool, "", "0123456789ab")
	s.wantErr(err, "StatFamily", rbd.ErrPoolNotFound)
	_, err = b.ListImages(ctx, nopool)
	s.wantErr(err, "ListImages", rbd.ErrPoolNotFound)
	_, err = b.PoolAvailable(ctx, nopool)
	s.wantErr(err, "PoolAvailable", rbd.ErrPoolNotFound)
	s.wantErr(b.RemoveImage(ctx, nopool, s.name("img")), "RemoveImage", rbd.ErrPoolNotFound)

	nons := s.Pool
	nons.Namespace = "contract-never-made"
	err = b.CreateImage(ctx, nons, s.name("img"), rbd.ImageSpec{Size: mib, Features: []string{"layering"}})
	s.wantErr(err, "CreateImage in a missing namespace", rbd.ErrPoolNotFound, rbd.ErrNamespaceNotFound)
}

// Metadata keys are set and removed one by one (missing keys are fine);
// an image grows; a rename keeps the image's ID and refuses a taken name.
func testMetadataResizeRename(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	name, other := s.name("img"), s.name("other")
	s.create(name, mib, map[string]string{"a": "1", "b": "2"})
	s.must(b.SetMetadata(ctx, p, name, map[string]string{"b": "3", "c": "4"}), "SetMetadata")
	s.must(b.RemoveMetadata(ctx, p, name, "a", "never-set"), "RemoveMetadata")
	s.must(b.Resize(ctx, p, name, 3*mib), "Resize")
	info, err := b.Stat(ctx, p, name)
	s.must(err, "Stat")
	if want := map[string]string{"b": "3", "c": "4"}; !maps.Equal(info.Metadata, want) || info.Size != 3*mib {
		t.Fatalf("after the changes: %+v, want metadata %v and 3 MiB", info, want)
	}

	s.create(other, mib, nil)
	s.wantErr(b.Rename(ctx, p, name, other), "Rename onto a taken name", rbd.ErrExists)
	s.must(b.RemoveImage(ctx, p, other), "RemoveImage")
	s.must(b.Rename(ctx, p, name, other), "Rename")
	_, err = b.Stat(ctx, p, name)
	s.wantErr(err, "Stat of the old name", rbd.ErrNotFound)
	moved, err := b.Stat(ctx, p, other)
	s.must(err, "Stat of the new name")
	if moved.ID != info.ID || moved.Name != other {
		t.Fatalf("renamed image %+v, want ID %s", moved, info.ID)
	}
	f, err := b.StatFamily(ctx, p, "", info.ID)
	s.must(err, "StatFamily by ID after the rename")
	if f.Name != other {
		t.Fatalf("StatFamily by ID names %q, want the new name %q", f.Name, other)
	}
}

// Another client with the image open (a mapped volume) blocks its
// removal, ErrBusy, and counts as a watcher; Stat itself opens no watch.
func testWatcherBlocksRemoval(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, mib, nil)
	unwatch := s.Watch(t, p, name)
	defer unwatch()
	if _, err := b.Stat(ctx, p, name); err != nil {
		t.Fatal(err)
	}
	if f := s.family(name); f.Watchers != 1 {
		t.Fatalf("watchers = %d with one client, want 1", f.Watchers)
	}
	s.wantErr(b.RemoveImage(ctx, p, name), "RemoveImage while watched", rbd.ErrBusy)
	if !s.listed(name) {
		t.Fatal("the watched image was removed")
	}
	unwatch()
	if f := s.family(name); f.Watchers != 0 {
		t.Fatalf("watchers = %d after the client left, want 0", f.Watchers)
	}
	s.must(b.RemoveImage(ctx, p, name), "RemoveImage after the client left")
}

// An interrupted removal leaves the name listed without a header: nothing
// opens it, and removing it again completes the removal (the controller's
// DeleteVolume retry and its sweep rely on both).
func testHalfRemovedImage(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, mib, nil)
	id := s.family(name).ID
	s.RemoveHeader(t, p, name)
	if !s.listed(name) {
		t.Fatal("a half-removed image is not listed")
	}
	_, err := b.Stat(ctx, p, name)
	s.wantErr(err, "Stat", rbd.ErrNotFound)
	_, err = b.StatFamily(ctx, p, name, "")
	s.wantErr(err, "StatFamily by name", rbd.ErrNotFound)
	_, err = b.StatFamily(ctx, p, "", id)
	s.wantErr(err, "StatFamily by ID", rbd.ErrNotFound)
	if err := b.RemoveImage(ctx, p, name); err != nil {
		s.wantErr(err, "RemoveImage of a half-removed image", rbd.ErrNotFound)
	}
	if s.listed(name) {
		t.Fatal("removing a half-removed image again leaves it listed")
	}
}

// An image and a clone have the features they were created with, sorted
// (the controller picks them by access mode). Ceph marks a clone-v2 child
// with a feature of its own, "operations", which is left out here.
func testFeatures(t *testing.T, s *suite) {
	full := []string{"layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten"}
	sorted := slices.Sorted(slices.Values(full))
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("full")
	s.must(b.CreateImage(ctx, p, name, rbd.ImageSpec{Size: 8 * mib, Features: full}), "CreateImage with every feature")
	info, err := b.Stat(ctx, p, name)
	s.must(err, "Stat")
	if !slices.Equal(info.Features, sorted) {
		t.Fatalf("features %v, want %v", info.Features, sorted)
	}
	// StatFamily, by name and by ID, reports them too (clones check the
	// parent's layering with it).
	fam, err := b.StatFamily(ctx, p, name, "")
	s.must(err, "StatFamily")
	byID, err := b.StatFamily(ctx, p, "", info.ID)
	s.must(err, "StatFamily by ID")
	if !slices.Equal(fam.Features, sorted) || !slices.Equal(byID.Features, sorted) {
		t.Fatalf("StatFamily features %v, by ID %v, want %v", fam.Features, byID.Features, sorted)
	}
	s.must(b.CreateSnapshot(ctx, p, name, "s"), "CreateSnapshot")
	for clone, features := range map[string][]string{"full-clone": full, "lean-clone": {"layering", "deep-flatten"}} {
		err := b.Clone(ctx, p, p, s.name(clone), rbd.CloneSpec{ParentImage: name, ParentSnap: "s", ImageSpec: rbd.ImageSpec{Features: features}})
		s.must(err, "Clone "+clone)
		info, err := b.Stat(ctx, p, s.name(clone))
		s.must(err, "Stat "+clone)
		got := slices.DeleteFunc(info.Features, func(f string) bool { return f == "operations" })
		if want := slices.Sorted(slices.Values(features)); !slices.Equal(got, want) {
			t.Errorf("%s: features %v, want %v", clone, info.Features, want)
		}
	}
}
