package ceph

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Diff runs librbd's diff_iterate2 on the image opened read-only at the
// snapshot: no watch, no lock, so a mapped volume's writer keeps its
// exclusive lock. It asks twice: for whole objects first, which librbd
// answers from the object map where the image has fast-diff (without
// visiting the objects of a thin image that hold nothing), then, within
// the objects that changed, for the extents they hold (whole_object off,
// which visits each object). Without fast-diff the first pass visits
// every object too, and the answer is the same. With a limit, both passes
// stop early: the whole-object pass once it has a limit's worth of
// objects' ranges, and is asked again from there if they hold too few
// extents; the second once it has the limit's extents. The image is
// opened once whatever the range, so a thin image costs one open, not one
// per window.
func (b *Backend) Diff(ctx context.Context, p rbd.Pool, spec rbd.DiffSpec) ([]rbd.Extent, error) {
	var out []rbd.Extent
	err := b.withIoctx(ctx, p, "Diff", func(ioctx *rados.IOContext) error {
		img, err := openSnap(ioctx, spec)
		if err != nil {
			return err
		}
		defer img.Close()
		if err := checkDiff(img, spec); err != nil {
			return err
		}
		// Without a base, a diff lists data: ranges that read as zeros
		// are not kept.
		data := spec.Base == "" && spec.BaseID == 0
		extents := &extentList{limit: spec.Limit, keep: func(e rbd.Extent) bool { return !data || !e.Zero }}
		end := spec.Offset + spec.Length
		for off := spec.Offset; off < end && !extents.full(); {
			objects := &extentList{limit: spec.Limit, anyZero: true}
			if err := diffIterate(ctx, img, spec, off, end-off, librbd.EnableWholeObject, objects); err != nil {
				return err
			}
			for _, o := range objects.result() {
				if err := diffIterate(ctx, img, spec, o.Offset, o.Length, librbd.DisableWholeObject, extents); err != nil {
					return err
				}
				if extents.full() {
					break
				}
			}
			if !objects.full() {
				break
			}
			got := objects.result()
			off = got[len(got)-1].End()
		}
		out = extents.result()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// extentList gathers a diff's extents as librbd reports them, joined
// where they touch, up to one more than its limit: the extra one shows
// that the limit's last extent is whole (what follows it does not touch
// it), and is dropped.
type extentList struct {
	exts  []rbd.Extent
	limit int
	// keep, when set, says which extents to gather; anyZero forgets
	// whether they hold data (the whole-object pass: the second pass
	// asks again).
	keep    func(rbd.Extent) bool
	anyZero bool
}

// add gathers e; false once the list is full.
func (l *extentList) add(e rbd.Extent) bool {
	if l.anyZero {
		e.Zero = false
	}
	if l.keep == nil || l.keep(e) {
		l.exts = rbd.Join(l.exts, e)
	}
	return !l.full()
}

func (l *extentList) full() bool { return l.limit > 0 && len(l.exts) > l.limit }

func (l *extentList) result() []rbd.Extent { return rbd.Truncate(l.exts, l.limit) }

// diffIterate is one diff_iterate2 (diff_iterate3 from a base named by
// ID) over [off, off+length) of spec, into list, until the list is full.
func diffIterate(ctx context.Context, img *librbd.Image, spec rbd.DiffSpec, off, length uint64, whole librbd.DiffWholeObject, list *extentList) error {
	if list.full() {
		return nil
	}
	// A callback that returns non-zero stops the walk, and librbd
	// returns that value as the call's.
	var full bool
	cb := func(off, length uint64, exists int, _ interface{}) int {
		if ctx.Err() != nil {
			return -1 // the caller is gone: stop the walk
		}
		if !list.add(rbd.Extent{Offset: off, Length: length, Zero: exists == 0}) {
			full = true
			return -1
		}
		return 0
	}
	include := librbd.ExcludeParent
	if spec.Base == "" && spec.BaseID == 0 {
		include = librbd.IncludeParent
	}
	var err error
	if spec.BaseID != 0 {
		err = img.DiffIterateByID(librbd.DiffIterateByIDConfig{FromSnapID: spec.BaseID, Offset: off, Length: length,
			IncludeParent: include, WholeObject: whole, Callback: cb})
		if errors.Is(err, librbd.ErrNotImplemented) {
			return fmt.Errorf("diff of image id %s@%s from snapshot #%d: %w: librbd lacks rbd_diff_iterate3 (Squid 19 or newer needed)", spec.ImageID, snapRef(spec), spec.BaseID, rbd.ErrNotSupported)
		}
	} else {
		err = img.DiffIterate(librbd.DiffIterateConfig{SnapName: spec.Base, Offset: off, Length: length,
			IncludeParent: include, WholeObject: whole, Callback: cb})
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("diff of image id %s@%s: %w", spec.ImageID, snapRef(spec), wrapCtx(ctx.Err()))
	case full:
		return nil
	case err != nil:
		return fmt.Errorf("diff of image id %s@%s from %q: %w", spec.ImageID, snapRef(spec), baseRef(spec), classify(err))
	}
	return nil
}

// snapRef and baseRef name spec's snapshots in messages: by name, or by
// ID as rbd --snap-id does (#ID).
func snapRef(spec rbd.DiffSpec) string {
	if spec.SnapID != 0 {
		return "#" + strconv.FormatUint(spec.SnapID, 10)
	}
	return spec.Snap
}

func baseRef(spec rbd.DiffSpec) string {
	if spec.BaseID != 0 {
		return "#" + strconv.FormatUint(spec.BaseID, 10)
	}
	return spec.Base
}

// openSnap opens spec's image by ID at its snapshot, read-only, telling a
// missing snapshot from a missing image.
func openSnap(ioctx *rados.IOContext, spec rbd.DiffSpec) (*librbd.Image, error) {
	id := spec.ImageID
	if spec.SnapID != 0 {
		img, err := librbd.OpenImageByIdReadOnly(ioctx, id, librbd.NoSnapshot)
		if err != nil {
			return nil, fmt.Errorf("opening image id %s: %w", id, classify(err))
		}
		if err := img.SetSnapByID(spec.SnapID); err != nil {
			img.Close()
			return nil, fmt.Errorf("opening image id %s at snapshot %s: %w", id, snapRef(spec), classify(err))
		}
		return img, nil
	}
	img, err := librbd.OpenImageByIdReadOnly(ioctx, id, spec.Snap)
	if err == nil {
		return img, nil
	}
	head, herr := librbd.OpenImageByIdReadOnly(ioctx, id, librbd.NoSnapshot)
	if herr != nil {
		return nil, fmt.Errorf("opening image id %s: %w", id, classify(herr))
	}
	head.Close()
	return nil, fmt.Errorf("opening image id %s at snapshot %s: %w", id, spec.Snap, classify(err))
}

// checkDiff refuses a base that is missing or not older than the
// snapshot, and a range past the snapshot's size, before librbd does with
// less to say.
func checkDiff(img *librbd.Image, spec rbd.DiffSpec) error {
	size, err := img.GetSize()
	if err != nil {
		return fmt.Errorf("size of image id %s@%s: %w", spec.ImageID, spec.Snap, classify(err))
	}
	if end := spec.Offset + spec.Length; end > size || end < spec.Offset {
		return fmt.Errorf("diff of image id %s@%s: range %d+%d past its %d bytes: %w", spec.ImageID, snapRef(spec), spec.Offset, spec.Length, size, rbd.ErrInvalid)
	}
	if spec.Base == "" && spec.BaseID == 0 {
		return nil
	}
	// GetSnapshotNames lists every namespace's snapshots, with their IDs.
	snaps, err := img.GetSnapshotNames()
	if err != nil {
		return fmt.Errorf("snapshots of image id %s: %w", spec.ImageID, classify(err))
	}
	var base, target *librbd.SnapInfo
	for i := range snaps {
		s := &snaps[i]
		if spec.BaseID != 0 && s.Id == spec.BaseID || spec.BaseID == 0 && s.Name == spec.Base && userSnap(img, s.Id) {
			base = s
		}
		if spec.SnapID != 0 && s.Id == spec.SnapID || spec.SnapID == 0 && s.Name == spec.Snap && userSnap(img, s.Id) {
			target = s
		}
	}
	switch {
	case base == nil:
		return fmt.Errorf("diff of image id %s@%s: base snapshot %s %w", spec.ImageID, snapRef(spec), baseRef(spec), rbd.ErrNotFound)
	case target == nil || base.Id >= target.Id:
		return fmt.Errorf("diff of image id %s@%s: base snapshot %s is not older: %w", spec.ImageID, snapRef(spec), baseRef(spec), rbd.ErrInvalid)
	}
	return nil
}

// userSnap: the snapshot of that ID is in the user namespace, where
// snapshot names are the user's (a group snapshot's may repeat one).
func userSnap(img *librbd.Image, id uint64) bool {
	ns, err := img.GetSnapNamespaceType(id)
	return err == nil && ns == librbd.SnapNamespaceTypeUser
}

// WriteAt writes into the image's head.
func (b *Backend) WriteAt(ctx context.Context, p rbd.Pool, name string, off uint64, data []byte) error {
	return b.withImageRW(ctx, p, name, "WriteAt", off, uint64(len(data)), func(img *librbd.Image) error {
		if _, err := img.WriteAt(data, int64(off)); err != nil {
			return fmt.Errorf("writing %d bytes at %d of %s: %w", len(data), off, name, classify(err))
		}
		return nil
	})
}

// Discard releases a range of the image's head.
func (b *Backend) Discard(ctx context.Context, p rbd.Pool, name string, off, length uint64) error {
	return b.withImageRW(ctx, p, name, "Discard", off, length, func(img *librbd.Image) error {
		if _, err := img.Discard(off, length); err != nil {
			return fmt.Errorf("discarding %d bytes at %d of %s: %w", length, off, name, classify(err))
		}
		return nil
	})
}

// withImageRW runs fn on the image opened read-write, by name, once
// [off, off+length) is known to lie within it: librbd would cut a range
// that crosses the end short, and write or discard only its first part.
func (b *Backend) withImageRW(ctx context.Context, p rbd.Pool, name, op string, off, length uint64, fn func(*librbd.Image) error) error {
	return b.withIoctx(ctx, p, op, func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s: %w", name, classify(err))
		}
		defer img.Close()
		size, err := img.GetSize()
		if err != nil {
			return fmt.Errorf("size of %s: %w", name, classify(err))
		}
		if end := off + length; end > size || end < off {
			return fmt.Errorf("%s of %d bytes at %d of %s (%d bytes): %w", op, length, off, name, size, rbd.ErrInvalid)
		}
		return fn(img)
	})
}
