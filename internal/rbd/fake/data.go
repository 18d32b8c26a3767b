package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The fake keeps where data was written, not the data: enough to answer
// Diff as RBD does. Every write gets a generation of its own, so two
// snapshots differ where their generations do.

// segment is a range written by one write (gen), or, when zero is set, a
// discard inside a clone's overlap: it holds no data but hides the
// parent's (RBD writes zeros there rather than releasing the objects).
type segment struct {
	off, end, gen uint64
	zero          bool
}

// extentMap is an image's written ranges, sorted and without overlap.
type extentMap []segment

// cut removes [off, end), splitting the segments it crosses.
func (m extentMap) cut(off, end uint64) extentMap {
	var out extentMap
	for _, s := range m {
		if s.end <= off || s.off >= end {
			out = append(out, s)
			continue
		}
		if s.off < off {
			out = append(out, segment{s.off, off, s.gen, s.zero})
		}
		if s.end > end {
			out = append(out, segment{end, s.end, s.gen, s.zero})
		}
	}
	return out
}

// put replaces [s.off, s.end) by s.
func (m extentMap) put(s segment) extentMap {
	out := m.cut(s.off, s.end)
	i, _ := slices.BinarySearchFunc(out, s.off, func(x segment, off uint64) int { return cmpU(x.off, off) })
	return slices.Insert(out, i, s)
}

// at returns the segment holding byte off, if any.
func (m extentMap) at(off uint64) (segment, bool) {
	for _, s := range m {
		if s.off <= off && off < s.end {
			return s, true
		}
	}
	return segment{}, false
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteAt records a write into the image's head.
func (c *Ceph) WriteAt(ctx context.Context, p rbd.Pool, name string, off uint64, data []byte) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		end := off + uint64(len(data))
		if end > img.size || end < off {
			return fmt.Errorf("writing %d bytes at %d of %s (%d bytes): %w", len(data), off, name, img.size, rbd.ErrInvalid)
		}
		if len(data) > 0 {
			c.nextID++
			img.data = img.data.put(segment{off, end, c.nextID, false})
		}
		return nil
	})
}

// Discard releases a range; inside a clone's overlap it hides the
// parent's data instead.
func (c *Ceph) Discard(ctx context.Context, p rbd.Pool, name string, off, length uint64) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		end := off + length
		if end > img.size || end < off {
			return fmt.Errorf("discarding %d bytes at %d of %s (%d bytes): %w", length, off, name, img.size, rbd.ErrInvalid)
		}
		img.data = img.data.cut(off, end)
		if hide := min(end, img.overlap); img.parent != nil && off < hide {
			c.nextID++
			img.data = img.data.put(segment{off, hide, c.nextID, true})
		}
		return nil
	})
}

// Diff answers from the snapshots' copies of the written ranges.
func (c *Ceph) Diff(ctx context.Context, p rbd.Pool, spec rbd.DiffSpec) ([]rbd.Extent, error) {
	if err := c.enter(ctx, p, false); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return nil, err
	}
	img, err := s.byID(spec.ImageID)
	if err != nil {
		return nil, err
	}
	sn := img.userSnap(spec.Snap)
	if spec.SnapID != 0 {
		sn = img.liveSnap(spec.SnapID)
	}
	if sn == nil {
		return nil, fmt.Errorf("diff of %s@%s(#%d): snapshot %w", spec.ImageID, spec.Snap, spec.SnapID, rbd.ErrNotFound)
	}
	end := spec.Offset + spec.Length
	if end > sn.size || end < spec.Offset {
		return nil, fmt.Errorf("diff of %s@%s: range %d+%d past its %d bytes: %w", spec.ImageID, sn.name, spec.Offset, spec.Length, sn.size, rbd.ErrInvalid)
	}
	if spec.Base == "" && spec.BaseID == 0 {
		return rbd.Truncate(rbd.Coalesce(c.allocated(sn, spec.Offset, end)), spec.Limit), nil
	}
	base := img.userSnap(spec.Base)
	if spec.BaseID != 0 {
		// The library without group snapshots (Pacific's, Reef's) has no
		// diff by snapshot ID either: both came with Squid.
		if c.groupSnaps != nil {
			return nil, fmt.Errorf("diff of %s@%s from snapshot #%d: %w: no diff by snapshot ID in this library", spec.ImageID, sn.name, spec.BaseID, rbd.ErrNotSupported)
		}
		base = img.liveSnap(spec.BaseID)
	}
	if base == nil {
		return nil, fmt.Errorf("diff of %s@%s: base snapshot %s(#%d) %w", spec.ImageID, sn.name, spec.Base, spec.BaseID, rbd.ErrNotFound)
	}
	if base.id >= sn.id {
		return nil, fmt.Errorf("diff of %s@%s: base snapshot %s is not older: %w", spec.ImageID, sn.name, base.name, rbd.ErrInvalid)
	}
	return rbd.Truncate(rbd.Coalesce(delta(base.data, sn.data, spec.Offset, end)), spec.Limit), nil
}

// allocated is where a reader of the snapshot finds data in [off, end):
// its own writes, and its parent's data it has not overwritten.
// Called with c.mu held.
func (c *Ceph) allocated(sn *snapshot, off, end uint64) []rbd.Extent {
	var out []rbd.Extent
	if sn.parent != nil {
		if _, psn := c.parentOf(sn.parent); psn != nil && off < min(end, sn.overlap) {
			for _, e := range c.allocated(psn, off, min(end, sn.overlap)) {
				out = append(out, uncovered(sn.data, e)...)
			}
		}
	}
	for _, s := range sn.data {
		if lo, hi := max(s.off, off), min(s.end, end); lo < hi && !s.zero {
			out = append(out, rbd.Extent{Offset: lo, Length: hi - lo})
		}
	}
	slices.SortFunc(out, func(a, b rbd.Extent) int { return cmpU(a.Offset, b.Offset) })
	return out
}

// uncovered is the part of e no segment of m covers.
func uncovered(m extentMap, e rbd.Extent) []rbd.Extent {
	var out []rbd.Extent
	at := e.Offset
	for _, s := range m {
		if s.end <= at || s.off >= e.End() {
			continue
		}
		if s.off > at {
			out = append(out, rbd.Extent{Offset: at, Length: s.off - at})
		}
		at = s.end
	}
	if at < e.End() {
		out = append(out, rbd.Extent{Offset: at, Length: e.End() - at})
	}
	return out
}

// delta is where two copies of an image's written ranges differ within
// [off, end); Zero where the newer holds no data.
func delta(old, cur extentMap, off, end uint64) []rbd.Extent {
	cuts := []uint64{off, end}
	for _, m := range []extentMap{old, cur} {
		for _, s := range m {
			cuts = append(cuts, max(off, min(s.off, end)), max(off, min(s.end, end)))
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []rbd.Extent
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		was, wasOK := old.at(a)
		is, isOK := cur.at(a)
		if wasOK == isOK && was.gen == is.gen {
			continue
		}
		out = append(out, rbd.Extent{Offset: a, Length: b - a, Zero: !isOK || is.zero})
	}
	return out
}

// snapshot is the image as it is now, under a snapshot's ID and name.
func (img *image) snapshot(id uint64, name string, created time.Time) *snapshot {
	return &snapshot{id: id, name: name, size: img.size, created: created, children: map[string]bool{},
		data: slices.Clone(img.data), parent: img.parent, overlap: img.overlap}
}

// maxEnd is the end of the last written range.
func maxEnd(m extentMap) uint64 {
	if len(m) == 0 {
		return 0
	}
	return m[len(m)-1].end
}

// copyUp writes into a clone the parent's data it reads. Called with c.mu
// held.
func (c *Ceph) copyUp(img *image) {
	if _, psn := c.parentOf(img.parent); psn != nil {
		for _, e := range c.allocated(psn, 0, min(psn.size, img.overlap)) {
			for _, u := range uncovered(img.data, e) {
				c.nextID++
				img.data = img.data.put(segment{u.Offset, u.End(), c.nextID, false})
			}
		}
	}
	img.overlap = 0
}
