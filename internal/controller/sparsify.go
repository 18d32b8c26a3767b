package controller

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A user asks for a sparsify with a VolumeAttributesClass whose sparsify
// parameter holds a new value (config.ParamSparsify): RBD then gives the
// detached volume's zero-filled blocks back to Ceph, which the node's
// fstrim cannot do for a volume no node has staged. ControllerModifyVolume
// answers Aborted while the sparsify runs, so the CO retries until it is
// done, and FailedPrecondition while the volume is attached or open.

// requestSparsify starts the sparsify a request asks for, unless it is
// done. The caller holds the volume's lock.
func (c *Controller) requestSparsify(ctx context.Context, pool rbd.Pool, vol volid.Volume, request string) error {
	if c.up.Sparsifying(pool, vol.Image) {
		return status.Errorf(codes.Aborted, "volume %s is being sparsified; the call succeeds once that is done", vol)
	}
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	if err != nil {
		return cephStatus(err)
	}
	if c.names.Volume(vol.Image, fam.Metadata).Sparsified == request {
		return nil
	}
	if nodes := attach.Nodes(fam.Metadata, fam.ID); len(nodes) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is attached to %s: %s %q runs on a detached volume only (stop its pods), since it would take the image's lock from the node at every object", vol, strings.Join(nodes, ", "), config.ParamSparsify, request)
	}
	if fam.Watchers > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is open by %d Ceph clients (mapped without an attachment?): %s %q runs on a volume no one has open", vol, fam.Watchers, config.ParamSparsify, request)
	}
	c.up.Sparsify(pool, vol.Image, vol.String(), request)
	return status.Errorf(codes.Aborted, "volume %s: %s %q started; the call succeeds once it is done", vol, config.ParamSparsify, request)
}

// sparsifying refuses an attach while the volume is being sparsified.
func (c *Controller) sparsifying(pool rbd.Pool, vol volid.Volume) error {
	if c.up.Sparsifying(pool, vol.Image) {
		return status.Errorf(codes.Aborted, "volume %s is being sparsified; it can be attached once that is done", vol)
	}
	return nil
}
