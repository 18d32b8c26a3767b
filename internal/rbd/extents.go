package rbd

import "context"

// Extent is a byte range of an image.
type Extent struct {
	Offset, Length uint64
	// Zero: in a diff from a base snapshot, the range holds no data any
	// more (its objects were discarded whole); a reader sees zeros there.
	Zero bool
}

// End is the first byte after the extent.
func (e Extent) End() uint64 { return e.Offset + e.Length }

// DiffSpec asks which extents of one snapshot hold data, or changed since
// an earlier snapshot of the same image.
type DiffSpec struct {
	// ImageID is the image, by RBD image ID (which a rename or a hidden
	// image keeps).
	ImageID string
	// Snap is the user snapshot read, or, when SnapID is set, the
	// snapshot of that ID in any namespace (a group snapshot's image
	// snapshot), which Snap then only names in messages.
	Snap   string
	SnapID uint64
	// Base, when set, is an older user snapshot of the same image: the
	// diff is then what changed from Base to Snap. BaseID names it by ID
	// instead, in any namespace, which needs librbd's diff by snapshot ID
	// (rbd_diff_iterate3, Squid 19 and later; ErrNotSupported before).
	// When neither is set, the diff is every extent that holds data in
	// Snap, the data a clone reads from its parent included.
	Base   string
	BaseID uint64
	// Offset and Length bound the range looked at; it must lie within
	// Snap's size.
	Offset, Length uint64
	// Limit, when set, stops the diff once it has found Limit extents: a
	// caller walking a large image asks again from the end of the last
	// one, holding no more than Limit at a time. Fewer than Limit means
	// the range is done.
	Limit int
}

// DataBackend reads where an image's data is (changed-block tracking) and
// writes it (tests and the bench do, as a mapped device would).
type DataBackend interface {
	// Diff returns the extents of spec's range, in offset order, without
	// overlap, cut to the range, joined where they touch, at most
	// spec.Limit of them. Ceph answers at byte precision or, for
	// some writes, rounded out to whole objects: an extent may be wider
	// than what was written, never narrower. It opens the image
	// read-only at Snap, which adds no watch and takes no lock.
	// A missing image or snapshot (Snap or Base) is ErrNotFound; a range
	// past Snap's size, or a base not older than Snap, ErrInvalid.
	Diff(ctx context.Context, p Pool, spec DiffSpec) ([]Extent, error)
	// WriteAt writes data into the image (its head, not a snapshot) at off.
	WriteAt(ctx context.Context, p Pool, name string, off uint64, data []byte) error
	// Discard releases [off, off+length) of the image; a reader sees zeros.
	Discard(ctx context.Context, p Pool, name string, off, length uint64) error
}

// Coalesce joins the extents of a sorted list that touch and agree on
// Zero: Ceph reports one per object, a reader wants the ranges.
func Coalesce(exts []Extent) []Extent {
	var out []Extent
	for _, e := range exts {
		out = Join(out, e)
	}
	return out
}

// Join appends e to the sorted list exts, joined to the last extent when
// they touch and agree on Zero.
func Join(exts []Extent, e Extent) []Extent {
	if e.Length == 0 {
		return exts
	}
	if n := len(exts); n > 0 && exts[n-1].End() == e.Offset && exts[n-1].Zero == e.Zero {
		exts[n-1].Length += e.Length
		return exts
	}
	return append(exts, e)
}

// Truncate cuts a diff's extents to limit (0: no limit).
func Truncate(exts []Extent, limit int) []Extent {
	if limit > 0 && len(exts) > limit {
		return exts[:limit]
	}
	return exts
}
