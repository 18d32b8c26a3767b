package upkeep

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// maxChain bounds how far reclaim walks up a clone chain; chains are kept
// far shorter by flattening.
const maxChain = 64

// RemoveTimeout bounds one image removal: without the object-map feature
// librbd tries every object of the image, minutes for many TiB.
const RemoveTimeout = 30 * time.Minute

// reclaim removes a hidden image once nothing depends on it any more, and
// walks on to its parent, which may have been waiting for it.
func (e *env) reclaim(ctx context.Context, pool rbd.Pool, imageID string) error {
	fam, err := e.familyByID(ctx, pool, imageID)
	if err != nil || fam == nil {
		return err
	}
	return e.reclaimFrom(ctx, pool, fam)
}

// familyByID reads an image's family; nil if the image or pool is gone.
func (e *env) familyByID(ctx context.Context, pool rbd.Pool, imageID string) (*rbd.Family, error) {
	fam, err := e.backend.StatFamily(ctx, pool, "", imageID)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &fam, nil
}

// reclaimFrom is reclaim of an image whose family the caller has read.
func (e *env) reclaimFrom(ctx context.Context, pool rbd.Pool, fam *rbd.Family) error {
	for i := 0; i < maxChain; i++ {
		if _, hidden := e.names.HiddenID(fam.Name); !hidden || len(fam.Snaps) > 0 || fam.TrashedSnaps > 0 || fam.Watchers > 0 {
			return nil
		}
		err := e.removeImage(ctx, pool, *fam)
		if errors.Is(err, rbd.ErrHasSnapshots) || errors.Is(err, rbd.ErrBusy) {
			return nil // a dependent appeared meanwhile; its removal reclaims
		}
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
		klog.V(2).InfoS("reclaimed the data of a deleted volume", "pool", pool.Name, "image", fam.Name)
		e.o.Observer.Reclaimed(reclaimedHidden)
		if fam.Parent == nil {
			return nil
		}
		pool = pool.WithName(fam.Parent.Pool)
		if fam, err = e.familyByID(ctx, pool, fam.Parent.ImageID); err != nil || fam == nil {
			return err
		}
	}
	return nil
}

// removeImage removes an image nobody uses any more (hidden, unfinished),
// queued behind other detaches from its parent: librbd removes a parent's
// trashed snapshot when its last clone detaches, and two clones detaching
// at once can each see the other still there, leaving the snapshot, and
// the kept parent, behind. The removal is not bounded by the request: an
// interrupted one would leave an image without a header (the sweep
// completes those).
func (e *env) removeImage(ctx context.Context, pool rbd.Pool, fam rbd.Family) error {
	if fam.Parent != nil {
		release, err := e.locks.Wait(ctx, records.ParentLock(fam.Parent.Pool, fam.Parent.ImageID))
		if err != nil {
			return err
		}
		defer release()
	}
	rctx, cancel := context.WithTimeout(context.Background(), RemoveTimeout)
	defer cancel()
	return e.backend.RemoveImage(rctx, pool, fam.Name)
}
