package controller

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// maxChain bounds how far reclaim walks up a clone chain; chains are kept
// far shorter by flattening.
const maxChain = 64

// removeTimeout bounds one image removal: without the object-map feature
// librbd tries every object of the image, minutes for many TiB.
const removeTimeout = 30 * time.Minute

// removeVolume deletes a volume image, or hides it while snapshots or
// clones still need its data, then reclaims ancestors nobody needs now.
// It owns release (the volume's lock) and calls it exactly once: when the
// removal itself is done, which may be after the request has given up.
func (c *Controller) removeVolume(ctx context.Context, pool rbd.Pool, vol volid.Volume, release func()) error {
	detached := false
	defer func() {
		if !detached {
			release()
		}
	}()
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	switch {
	case errors.Is(err, rbd.ErrPoolNotFound):
		return nil
	case errors.Is(err, rbd.ErrNotFound):
		// Gone, or half-removed by an interrupted removal (still listed,
		// but without a header): removing again completes it.
		fam = rbd.Family{}
	case err != nil:
		return cephStatus(err)
	}
	if nodes := attach.Nodes(fam.Metadata); len(nodes) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is attached to node(s) %v; detach it first", vol, nodes)
	}
	if fam.Watchers > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is in use: a node still has it mapped; unmount it first", vol)
	}
	if len(fam.Snaps) > 0 || fam.TrashedSnaps > 0 {
		return c.hide(ctx, pool, vol, fam)
	}
	// The removal runs apart from the request and keeps the lock until it
	// ends, so a retry meanwhile hears that it is in progress instead of
	// finding a half-removed image.
	detached = true
	done := make(chan error, 1)
	go func() {
		defer release()
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		done <- c.finishRemoval(rctx, pool, vol, fam)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return status.Errorf(codes.DeadlineExceeded, "volume %s is still being deleted (a large image without the object-map feature takes a while); retry later", vol)
	}
}

func (c *Controller) finishRemoval(ctx context.Context, pool rbd.Pool, vol volid.Volume, fam rbd.Family) error {
	if fam.Parent != nil {
		// Clones of one parent are removed one at a time: librbd removes a
		// parent's trashed snapshot when its last clone detaches, and two
		// clones detaching at once can each see the other still there,
		// leaving the snapshot, and the kept parent, behind.
		release, err := c.waitLock(ctx, records.ParentLock(fam.Parent.Pool, fam.Parent.ImageID))
		if err != nil {
			return err
		}
		defer release()
	}
	err := c.backend.RemoveImage(ctx, pool, vol.Image)
	switch {
	case err == nil:
		klog.V(2).InfoS("deleted volume", "volumeID", vol.String())
	case errors.Is(err, rbd.ErrNotFound):
		klog.V(2).InfoS("volume is gone already", "volumeID", vol.String())
	case errors.Is(err, rbd.ErrBusy):
		return status.Errorf(codes.FailedPrecondition, "volume %s is in use: a node still has it mapped; unmount it first", vol)
	case errors.Is(err, rbd.ErrHasSnapshots): // a snapshot arrived meanwhile
		return c.hide(ctx, pool, vol, fam)
	default:
		return cephStatus(err)
	}
	if fam.Parent != nil {
		c.opts.Fault("DeleteVolume:removed")
		return c.reclaim(ctx, parentPool(pool, fam.Parent), fam.Parent.ImageID)
	}
	return nil
}

// hide renames the image out of the volume namespace: the volume is gone
// for the user (and its name free for a new volume), while its snapshots
// and clones keep their data.
func (c *Controller) hide(ctx context.Context, pool rbd.Pool, vol volid.Volume, fam rbd.Family) error {
	if err := c.backend.Rename(ctx, pool, vol.Image, c.names.Hidden(fam.ID)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return cephStatus(err)
	}
	klog.V(2).InfoS("deleted volume; its data stays for its snapshots", "volumeID", vol.String(), "image", c.names.Hidden(fam.ID))
	return nil
}

// reclaim removes a hidden image once nothing depends on it any more, and
// walks on to its parent, which may have been waiting for it.
func (c *Controller) reclaim(ctx context.Context, pool rbd.Pool, imageID string) error {
	fam, err := c.familyByID(ctx, pool, imageID)
	if err != nil || fam == nil {
		return err
	}
	return c.reclaimFrom(ctx, pool, fam)
}

// familyByID reads an image's family; nil if the image or pool is gone.
func (c *Controller) familyByID(ctx context.Context, pool rbd.Pool, imageID string) (*rbd.Family, error) {
	fam, err := c.backend.StatFamily(ctx, pool, "", imageID)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, cephStatus(err)
	}
	return &fam, nil
}

// reclaimFrom is reclaim of an image whose family the caller has read.
func (c *Controller) reclaimFrom(ctx context.Context, pool rbd.Pool, fam *rbd.Family) error {
	for i := 0; i < maxChain; i++ {
		if _, hidden := c.names.HiddenID(fam.Name); !hidden || len(fam.Snaps) > 0 || fam.TrashedSnaps > 0 || fam.Watchers > 0 {
			return nil
		}
		err := c.removeImage(ctx, pool, *fam)
		if errors.Is(err, rbd.ErrHasSnapshots) || errors.Is(err, rbd.ErrBusy) {
			return nil // a dependent appeared meanwhile; its removal reclaims
		}
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return cephStatus(err)
		}
		klog.V(2).InfoS("reclaimed the data of a deleted volume", "pool", pool.Name, "image", fam.Name)
		c.opts.Upkeep.Reclaimed(reclaimedHidden)
		if fam.Parent == nil {
			return nil
		}
		pool = parentPool(pool, fam.Parent)
		if fam, err = c.familyByID(ctx, pool, fam.Parent.ImageID); err != nil || fam == nil {
			return err
		}
	}
	return nil
}

// removeImage removes an image nobody uses any more (hidden, unfinished),
// queued behind other detaches from its parent (see finishRemoval). The
// removal is not bounded by the request: an interrupted one would leave an
// image without a header (the sweeper completes those).
func (c *Controller) removeImage(ctx context.Context, pool rbd.Pool, fam rbd.Family) error {
	if fam.Parent != nil {
		release, err := c.waitLock(ctx, records.ParentLock(fam.Parent.Pool, fam.Parent.ImageID))
		if err != nil {
			return err
		}
		defer release()
	}
	rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	return c.backend.RemoveImage(rctx, pool, fam.Name)
}

func parentPool(child rbd.Pool, p *rbd.Parent) rbd.Pool {
	child.Name = p.Pool
	return child
}

// waitLock takes a key of the controller's try-locks, polling until it is
// free or ctx ends: for work that must queue rather than be refused.
func (c *Controller) waitLock(ctx context.Context, key string) (func(), error) {
	for {
		if release, ok := c.locks.TryLock(key); ok {
			return release, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "waiting for %s: %v", key, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
