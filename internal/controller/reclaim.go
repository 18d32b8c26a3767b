package controller

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// maxChain bounds how far reclaim walks up a clone chain; chains are kept
// far shorter by flattening.
const maxChain = 64

// removeVolume deletes a volume image, or hides it while snapshots or
// clones still need its data, then reclaims ancestors nobody needs now.
func (c *Controller) removeVolume(ctx context.Context, pool rbd.Pool, vol volid.Volume) error {
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		klog.V(2).InfoS("volume is gone already", "volumeID", vol.String())
		return nil
	}
	if err != nil {
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
	err = c.backend.RemoveImage(ctx, pool, vol.Image)
	switch {
	case err == nil, errors.Is(err, rbd.ErrNotFound):
	case errors.Is(err, rbd.ErrBusy):
		return status.Errorf(codes.FailedPrecondition, "volume %s is in use: a node still has it mapped; unmount it first", vol)
	case errors.Is(err, rbd.ErrHasSnapshots): // a snapshot arrived meanwhile
		return c.hide(ctx, pool, vol, fam)
	default:
		return cephStatus(err)
	}
	klog.V(2).InfoS("deleted volume", "volumeID", vol.String())
	if fam.Parent != nil {
		return c.reclaim(ctx, parentPool(pool, fam.Parent), fam.Parent.ImageID)
	}
	return nil
}

// hide renames the image out of the volume namespace: the volume is gone
// for the user (and its name free for a new volume), while its snapshots
// and clones keep their data.
func (c *Controller) hide(ctx context.Context, pool rbd.Pool, vol volid.Volume, fam rbd.Family) error {
	if err := c.backend.Rename(ctx, pool, vol.Image, hiddenPrefix+fam.ID); err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return cephStatus(err)
	}
	klog.V(2).InfoS("deleted volume; its data stays for its snapshots", "volumeID", vol.String(), "image", hiddenPrefix+fam.ID)
	return nil
}

// reclaim removes a hidden image once nothing depends on it any more, and
// walks on to its parent, which may have been waiting for it.
func (c *Controller) reclaim(ctx context.Context, pool rbd.Pool, imageID string) error {
	for i := 0; i < maxChain && imageID != ""; i++ {
		fam, err := c.backend.StatFamily(ctx, pool, "", imageID)
		if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
			return nil
		}
		if err != nil {
			return cephStatus(err)
		}
		if !strings.HasPrefix(fam.Name, hiddenPrefix) || len(fam.Snaps) > 0 || fam.TrashedSnaps > 0 || fam.Watchers > 0 {
			return nil
		}
		err = c.backend.RemoveImage(ctx, pool, fam.Name)
		if errors.Is(err, rbd.ErrHasSnapshots) || errors.Is(err, rbd.ErrBusy) {
			return nil // a dependent appeared meanwhile; its removal reclaims
		}
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return cephStatus(err)
		}
		klog.V(2).InfoS("reclaimed the data of a deleted volume", "pool", pool.Name, "image", fam.Name)
		if fam.Parent == nil {
			return nil
		}
		pool, imageID = parentPool(pool, fam.Parent), fam.Parent.ImageID
	}
	return nil
}

func parentPool(child rbd.Pool, p *rbd.Parent) rbd.Pool {
	child.Name = p.Pool
	return child
}
