package rbdtest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// objectSize is the RADOS object size of the suite's images (order 22,
// RBD's default): Ceph may round a diff's extents out to it, never in.
// (Pacific reports an object new since the base from its start to the
// end of its data: a write inside one shows from the object's start.)
const objectSize = 4 * mib

// small is the size of the suite's writes: a fraction of an object, so a
// report rounded out to whole objects shows.
const small = 64 << 10

func ext(off, length uint64) rbd.Extent { return rbd.Extent{Offset: off, Length: length} }

// write writes each extent of the image's head.
func (s *suite) write(name string, exts ...rbd.Extent) {
	s.t.Helper()
	for _, e := range exts {
		err := s.Backend.WriteAt(s.ctx(), s.Pool, name, e.Offset, bytes.Repeat([]byte{0x5a}, int(e.Length)))
		s.must(err, fmt.Sprintf("WriteAt %d+%d of %s", e.Offset, e.Length, name))
	}
}

func (s *suite) snap(image, snap string) {
	s.t.Helper()
	s.must(s.Backend.CreateSnapshot(s.ctx(), s.Pool, image, snap), "CreateSnapshot "+image+"@"+snap)
}

// diff runs Diff, checks its answer against want (covers) and returns it.
// A diff without a base lists data, never a hole.
func (s *suite) diff(spec rbd.DiffSpec, want ...rbd.Extent) []rbd.Extent {
	s.t.Helper()
	what := fmt.Sprintf("Diff of @%s(#%d) from %q(#%d) over %d+%d", spec.Snap, spec.SnapID, spec.Base, spec.BaseID, spec.Offset, spec.Length)
	got, err := s.Backend.Diff(s.ctx(), s.Pool, spec)
	s.must(err, what)
	s.t.Logf("%s = %+v", what, got)
	covers(s.t, what, got, want, objectSize, spec.Offset, spec.Offset+spec.Length)
	if spec.Base == "" && spec.BaseID == 0 && slices.ContainsFunc(got, func(e rbd.Extent) bool { return e.Zero }) {
		s.t.Errorf("%s = %+v: lists a range without data", what, got)
	}
	for _, limit := range []int{1, 2} {
		if walked := s.walk(spec, limit); !slices.Equal(walked, got) {
			s.t.Errorf("%s with a limit of %d, asked again from the end of each answer: %+v, want %+v", what, limit, walked, got)
		}
	}
	return got
}

// walk runs Diff over spec's range limit extents at a time, as a caller
// holding no more than that does, and returns what it found, joined.
func (s *suite) walk(spec rbd.DiffSpec, limit int) []rbd.Extent {
	s.t.Helper()
	var walked []rbd.Extent
	end := spec.Offset + spec.Length
	for page, off := 0, spec.Offset; off < end; page++ {
		if page > 100 {
			s.t.Fatalf("Diff with a limit of %d: still answering after %d calls, at %d", limit, page, off)
		}
		ask := spec
		ask.Offset, ask.Length, ask.Limit = off, end-off, limit
		got, err := s.Backend.Diff(s.ctx(), s.Pool, ask)
		s.must(err, fmt.Sprintf("Diff with a limit of %d from %d", limit, off))
		if len(got) > limit {
			s.t.Fatalf("Diff with a limit of %d from %d = %+v: more than the limit", limit, off, got)
		}
		for _, e := range got {
			walked = rbd.Join(walked, e)
		}
		if len(got) < limit {
			break
		}
		off = got[len(got)-1].End()
	}
	return walked
}

// covers checks the answer got of a diff over [off, end) against the
// ranges want that changed: got is sorted, without overlap or empty
// extents, inside the range; it holds every byte of want there (joining
// the extents that touch: Ceph reports one per object), and nothing
// beyond want rounded out to grain.
func covers(t *testing.T, what string, got, want []rbd.Extent, grain, off, end uint64) {
	t.Helper()
	for i, g := range got {
		if g.Length == 0 || g.Offset < off || g.End() > end || (i > 0 && g.Offset < got[i-1].End()) {
			t.Errorf("%s = %+v: not sorted, disjoint, non-empty extents within [%d, %d)", what, got, off, end)
			return
		}
	}
	have := merge(got)
	var allowed []rbd.Extent
	for _, w := range want {
		if lo, hi := max(w.Offset, off), min(w.End(), end); lo < hi && !within(ext(lo, hi-lo), have) {
			t.Errorf("%s = %+v: misses %d+%d", what, got, lo, hi-lo)
		}
		if lo, hi := max(w.Offset/grain*grain, off), min((w.End()+grain-1)/grain*grain, end); lo < hi {
			allowed = append(allowed, ext(lo, hi-lo))
		}
	}
	slices.SortFunc(allowed, func(a, b rbd.Extent) int { return cmp.Compare(a.Offset, b.Offset) })
	allowed = merge(allowed)
	for _, g := range got {
		if !within(g, allowed) {
			t.Errorf("%s = %+v: %d+%d lies beyond what was written (%+v), even rounded out to %d bytes", what, got, g.Offset, g.Length, want, grain)
		}
	}
}

// merge joins the extents of a sorted list that touch or overlap,
// whatever their Zero.
func merge(exts []rbd.Extent) []rbd.Extent {
	var out []rbd.Extent
	for _, e := range exts {
		if n := len(out); n > 0 && e.Offset <= out[n-1].End() {
			out[n-1].Length = max(out[n-1].End(), e.End()) - out[n-1].Offset
			continue
		}
		out = append(out, ext(e.Offset, e.Length))
	}
	return out
}

// within reports whether e lies inside one extent of exts.
func within(e rbd.Extent, exts []rbd.Extent) bool {
	return slices.ContainsFunc(exts, func(x rbd.Extent) bool { return x.Offset <= e.Offset && e.End() <= x.End() })
}

// absent checks that no extent of got touches e. covers already implies
// it where e is objects away from what changed; this says so by name.
func (s *suite) absent(what string, got []rbd.Extent, e rbd.Extent) {
	s.t.Helper()
	for _, g := range got {
		if g.Offset < e.End() && e.Offset < g.End() {
			s.t.Errorf("%s %+v lists %d+%d, which did not change", what, got, e.Offset, e.Length)
		}
	}
}

// A snapshot's diff without a base is where it holds data; from an older
// snapshot, where it was written since (a range rewritten counts, one
// written before the base alone does not). Offset and Length bound the
// range looked at and cut what is reported.
func testDataDiffAllocatedAndDelta(t *testing.T, s *suite) {
	name := s.name("img")
	s.create(name, 64*mib, nil)
	// Each in an object of its own, so that rounding cannot join them;
	// early and start begin an object, twice and mid lie inside one.
	early, twice, mid, start := ext(0, small), ext(5*mib, small), ext(18*mib, small), ext(24*mib, small)
	s.write(name, early, twice)
	s.snap(name, "base")
	s.write(name, twice, mid, start)
	s.snap(name, "snap")
	id := s.family(name).ID

	s.diff(rbd.DiffSpec{ImageID: id, Snap: "base", Length: 64 * mib}, early, twice)
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Length: 64 * mib}, early, twice, mid, start)
	delta := s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Base: "base", Length: 64 * mib}, twice, mid, start)
	s.absent("the delta", delta, early)

	// From the middle of twice to the middle of mid: both are cut.
	from, to := twice.Offset+small/2, mid.Offset+small/2
	sub := rbd.DiffSpec{ImageID: id, Snap: "snap", Offset: from, Length: to - from}
	s.diff(sub, early, twice, mid, start)
	sub.Base = "base"
	s.diff(sub, twice, mid, start)
}

// A clone's snapshot holds what it reads from its parent's snapshot (not
// what the parent wrote since) as well as its own writes; the delta
// between two of the clone's snapshots is its own writes alone. A write
// into an object the parent has data in copies the object up first,
// which the delta may report up to the whole object.
func testDataDiffFromParent(t *testing.T, s *suite) {
	parent, child := s.name("parent"), s.name("child")
	s.create(parent, 64*mib, nil)
	p0, p2 := ext(0, small), ext(9*mib, small)
	s.write(parent, p0, p2)
	s.snap(parent, "snap")
	s.write(parent, ext(28*mib, small))
	s.clone(parent, "snap", child, 0, nil)
	s.snap(child, "base")
	// c2 shares p2's object (a copy-up), c5 has one of its own.
	c2, c5 := ext(11*mib, small), ext(20*mib, small)
	s.write(child, c2, c5)
	s.snap(child, "snap")
	id := s.family(child).ID

	s.diff(rbd.DiffSpec{ImageID: id, Snap: "base", Length: 64 * mib}, p0, p2)
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Length: 64 * mib}, p0, p2, c2, c5)
	delta := s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Base: "base", Length: 64 * mib}, c2, c5)
	s.absent("the clone's delta", delta, p0)
}

// An image grown between two snapshots: a write in the grown part is in
// the delta; the older snapshot has its own size, and a range past it is
// ErrInvalid there.
func testDataDiffAfterResize(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, 32*mib, nil)
	old, grown := ext(0, small), ext(40*mib, small)
	s.write(name, old)
	s.snap(name, "base")
	s.must(b.Resize(ctx, p, name, 64*mib), "Resize")
	s.write(name, grown)
	s.snap(name, "snap")
	id := s.family(name).ID

	delta := s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Base: "base", Length: 64 * mib}, grown)
	s.absent("the delta", delta, old)
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Offset: 32 * mib, Length: 32 * mib}, old, grown)
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "base", Length: 32 * mib}, old)
	_, err := b.Diff(ctx, p, rbd.DiffSpec{ImageID: id, Snap: "base", Length: 64 * mib})
	s.wantErr(err, "Diff of the older snapshot past its size", rbd.ErrInvalid)
}

// A whole object discarded after the base: the delta covers it (Ceph may
// mark it Zero or not: a reader sees zeros there either way), and the
// snapshot no longer lists it as data.
func testDataDiffAfterDiscard(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, 64*mib, nil)
	kept, gone := ext(0, small), ext(2*objectSize, objectSize)
	s.write(name, kept, gone)
	s.snap(name, "base")
	s.must(b.Discard(ctx, p, name, gone.Offset, gone.Length), "Discard")
	s.snap(name, "snap")
	id := s.family(name).ID

	s.diff(rbd.DiffSpec{ImageID: id, Snap: "base", Length: 64 * mib}, kept, gone)
	delta := s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Base: "base", Length: 64 * mib}, gone)
	s.absent("the delta", delta, kept)
	data := s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Length: 64 * mib}, kept)
	s.absent("the data after the discard", data, gone)
}

// A missing image (by ID), snapshot or base is ErrNotFound; a base not
// older than the snapshot, a range past the snapshot's size (or past the
// end of numbers) and a write or discard past the image's end are
// ErrInvalid, refused whole.
func testDataMissingAndInvalid(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, 8*mib, nil)
	s.snap(name, "one")
	s.write(name, ext(0, small))
	s.snap(name, "two")
	id := s.family(name).ID

	for _, tc := range []struct {
		what string
		spec rbd.DiffSpec
		want error
	}{
		{"a missing image", rbd.DiffSpec{ImageID: "0123456789ab", Snap: "one", Length: mib}, rbd.ErrNotFound},
		{"a missing snapshot", rbd.DiffSpec{ImageID: id, Snap: "nosnap", Length: mib}, rbd.ErrNotFound},
		{"a missing base", rbd.DiffSpec{ImageID: id, Snap: "two", Base: "nosnap", Length: mib}, rbd.ErrNotFound},
		{"a base newer than the snapshot", rbd.DiffSpec{ImageID: id, Snap: "one", Base: "two", Length: mib}, rbd.ErrInvalid},
		{"a range past the snapshot's size", rbd.DiffSpec{ImageID: id, Snap: "two", Offset: 4 * mib, Length: 8 * mib}, rbd.ErrInvalid},
		{"a range past the end of numbers", rbd.DiffSpec{ImageID: id, Snap: "two", Offset: mib, Length: math.MaxUint64}, rbd.ErrInvalid},
	} {
		_, err := b.Diff(ctx, p, tc.spec)
		s.wantErr(err, "Diff of "+tc.what, tc.want)
	}

	s.wantErr(b.WriteAt(ctx, p, s.name("missing"), 0, []byte{1}), "WriteAt of a missing image", rbd.ErrNotFound)
	s.wantErr(b.Discard(ctx, p, s.name("missing"), 0, small), "Discard of a missing image", rbd.ErrNotFound)
	s.wantErr(b.WriteAt(ctx, p, name, 8*mib, []byte{1}), "WriteAt at the image's end", rbd.ErrInvalid)
	s.wantErr(b.WriteAt(ctx, p, name, 8*mib-small/2, make([]byte, small)), "WriteAt across the image's end", rbd.ErrInvalid)
	s.wantErr(b.Discard(ctx, p, name, 8*mib, small), "Discard at the image's end", rbd.ErrInvalid)
	s.wantErr(b.Discard(ctx, p, name, 8*mib-small/2, small), "Discard across the image's end", rbd.ErrInvalid)
}

// Diff opens the image read-only: a mapped volume's writer keeps its
// exclusive lock through it, and Diff leaves no client of its own behind
// (the controller diffs volumes that nodes have mapped).
func testDataDiffTakesNoLock(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.must(b.CreateImage(ctx, p, name, rbd.ImageSpec{Size: 64 * mib, Features: []string{"layering", "exclusive-lock"}}), "CreateImage")
	before, since := ext(0, small), ext(2*objectSize, small)
	s.write(name, before)
	s.snap(name, "base")
	s.write(name, since)
	s.snap(name, "snap")
	id := s.family(name).ID

	// The mapping writes too, after the snapshots: they do not see it.
	unmap := s.Map(t, p, name)
	defer unmap()
	cs, err := b.Clients(ctx, p, name)
	s.must(err, "Clients")
	if len(cs) != 1 || cs[0].Own || !cs[0].Lock {
		t.Fatalf("Clients with a writer = %+v, want one, locking, not our own", cs)
	}
	holder := cs[0].Addr
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Length: 64 * mib}, before, since)
	s.diff(rbd.DiffSpec{ImageID: id, Snap: "snap", Base: "base", Length: 64 * mib}, since)
	cs, err = b.Clients(ctx, p, name)
	s.must(err, "Clients after the diffs")
	if len(cs) != 1 || cs[0].Addr != holder || !cs[0].Lock || cs[0].Own {
		t.Fatalf("Clients after the diffs = %+v, want %s alone, still locking", cs, holder)
	}
}

// A group snapshot's image snapshots are reached by ID: what one holds,
// the delta between two, and between one and a user snapshot, either way
// round. A library without group snapshots (Pacific's, Reef's) may still
// diff from a base named by ID (Reef's from 18.2.5 has rbd_diff_iterate3,
// not rbd_clone4): the answer is then right, or else ErrNotSupported.
func testDataDiffByID(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	img, g := s.name("img"), s.name("g")
	s.create(img, 64*mib, nil)
	a, mid, late, after := ext(0, small), ext(9*mib, small), ext(20*mib, small), ext(30*mib, small)
	s.write(img, a)
	s.snap(img, "u1")
	f := s.family(img)
	if unsupported := b.GroupSnapshots(); unsupported != nil {
		s.write(img, mid)
		s.snap(img, "u2")
		spec := rbd.DiffSpec{ImageID: f.ID, Snap: "u2", BaseID: f.Snaps[0].ID, Length: 64 * mib}
		if _, err := b.Diff(ctx, p, spec); errors.Is(err, rbd.ErrNotSupported) {
			t.Logf("Diff from a base named by ID: %v", err)
		} else {
			s.absent("the delta from a base named by ID", s.diff(spec, mid), a)
		}
		t.Skipf("the backend's Ceph library lacks group snapshots: %v", unsupported)
	}
	s.must(b.CreateGroup(ctx, p, g), "CreateGroup")
	defer func() { s.must(b.RemoveGroup(ctx, p, g), "RemoveGroup") }()
	s.must(b.AddToGroup(ctx, p, g, img), "AddToGroup")
	taken := func(name string) uint64 {
		gs, err := b.SnapshotGroup(ctx, p, g, name)
		s.must(err, "SnapshotGroup "+name)
		if len(gs.Members) != 1 || gs.Members[0].SnapID == 0 {
			t.Fatalf("group snapshot %s: members %+v, want one", name, gs.Members)
		}
		return gs.Members[0].SnapID
	}
	g1 := taken("g1")
	s.write(img, mid)
	s.snap(img, "u2")
	s.write(img, late)
	g2 := taken("g2")
	s.write(img, after)
	s.snap(img, "u3")

	whole := rbd.DiffSpec{ImageID: f.ID, Length: 64 * mib}
	at := func(snap string, snapID uint64, base string, baseID uint64) rbd.DiffSpec {
		d := whole
		d.Snap, d.SnapID, d.Base, d.BaseID = snap, snapID, base, baseID
		return d
	}
	s.diff(at("g1", g1, "", 0), a)
	s.absent("the delta of two group snapshots", s.diff(at("g2", g2, "", g1), mid, late), a)
	s.absent("the delta from a user snapshot to a group snapshot", s.diff(at("g2", g2, "u2", 0), late), mid)
	s.absent("the delta from a group snapshot to a user snapshot", s.diff(at("u2", 0, "", g1), mid), late)
	s.absent("the delta from a group snapshot to a later user snapshot", s.diff(at("u3", 0, "", g2), after), late)
	_, err := b.Diff(ctx, p, at("g1", g1, "", g2))
	s.wantErr(err, "Diff from a newer base by ID", rbd.ErrInvalid)
	_, err = b.Diff(ctx, p, at("gone", 1<<40, "", 0))
	s.wantErr(err, "Diff of a missing snapshot ID", rbd.ErrNotFound)
	_, err = b.Diff(ctx, p, at("g2", g2, "", 1<<40))
	s.wantErr(err, "Diff from a missing base ID", rbd.ErrNotFound)
}
