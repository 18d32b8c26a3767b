package controller

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A user asks for a sparsify with a VolumeAttributesClass whose sparsify
// parameter holds a new value (config.ParamSparsify): RBD then gives the
// detached volume's zero-filled blocks back to Ceph, which the node's
// fstrim cannot do for a volume no node has staged. ControllerModifyVolume
// answers Aborted while the sparsify runs, so the CO retries until it is
// done, and FailedPrecondition while the volume is attached or open.

// sparsifyTimeout bounds one sparsify: it reads every object the image has.
const sparsifyTimeout = 6 * time.Hour

// requestSparsify starts the sparsify a request asks for, unless it is
// done. The caller holds the volume's lock.
func (c *Controller) requestSparsify(ctx context.Context, pool rbd.Pool, vol volid.Volume, request string) error {
	key := records.PoolImageKey(pool, vol.Image)
	if c.sparsifies.busy(key) {
		return status.Errorf(codes.Aborted, "volume %s is being sparsified; the call succeeds once that is done", vol)
	}
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	if err != nil {
		return cephStatus(err)
	}
	if c.names.Volume(vol.Image, fam.Metadata).Sparsified == request {
		return nil
	}
	if nodes := attach.Nodes(fam.Metadata); len(nodes) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is attached to %s: %s %q runs on a detached volume only (stop its pods), since it would take the image's lock from the node at every object", vol, strings.Join(nodes, ", "), config.ParamSparsify, request)
	}
	if fam.Watchers > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is open by %d Ceph clients (mapped without an attachment?): %s %q runs on a volume no one has open", vol, fam.Watchers, config.ParamSparsify, request)
	}
	c.sparsifies.start(key, func(ctx context.Context) {
		c.opts.Upkeep.BackgroundTasks("sparsify", 1)
		defer c.opts.Upkeep.BackgroundTasks("sparsify", -1)
		ctx, cancel := context.WithTimeout(ctx, sparsifyTimeout)
		defer cancel()
		start := time.Now()
		if err := c.backend.Sparsify(ctx, pool, vol.Image); err != nil {
			klog.ErrorS(err, "sparsifying a volume failed; the CO's retry starts it again", "volumeID", vol.String())
			return
		}
		if err := c.backend.SetMetadata(ctx, pool, vol.Image, records.SparsifiedMetadata(request)); err != nil {
			klog.ErrorS(err, "recording a volume's sparsify", "volumeID", vol.String())
			return
		}
		klog.V(2).InfoS("sparsified volume", "volumeID", vol.String(), "request", request, "took", time.Since(start))
	})
	return status.Errorf(codes.Aborted, "volume %s: %s %q started; the call succeeds once it is done", vol, config.ParamSparsify, request)
}

// sparsifying refuses an attach while the volume is being sparsified.
func (c *Controller) sparsifying(pool rbd.Pool, vol volid.Volume) error {
	if c.sparsifies.busy(records.PoolImageKey(pool, vol.Image)) {
		return status.Errorf(codes.Aborted, "volume %s is being sparsified; it can be attached once that is done", vol)
	}
	return nil
}
