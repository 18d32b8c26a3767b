package controller

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/controller/upkeep"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// removeVolume deletes a volume image, or hides it while snapshots or
// clones still need its data, then reclaims ancestors nobody needs now
// (upkeep.Reclaim).
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
	if m := fam.Mirror; m != nil && !m.Primary {
		// librbd removes no such copy; rbd-mirror does, when the
		// primary goes or stops mirroring.
		return status.Errorf(codes.FailedPrecondition, "volume %s is a non-primary mirror copy: delete it at its primary site (rbd-mirror then removes this copy), disable its replication there, or promote this copy first", vol)
	}
	if nodes := attach.Nodes(fam.Metadata, fam.ID); len(nodes) > 0 {
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
		rctx, cancel := context.WithTimeout(context.Background(), upkeep.RemoveTimeout)
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
		if err := c.up.Reclaim(ctx, pool.WithName(fam.Parent.Pool), fam.Parent.ImageID); err != nil {
			return cephStatus(err)
		}
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
