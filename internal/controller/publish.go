package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// ControllerPublishVolume records the attachment of a volume to a node.
func (c *Controller) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if c.nodes == nil {
		return nil, status.Error(codes.Unimplemented, "attachments need the node registry (--node-registry)")
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	case node == "":
		return nil, status.Error(codes.InvalidArgument, "node ID is missing")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability is missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := c.checkVolumeContext(id, req.GetVolumeContext()); err != nil {
		return nil, err
	}
	n, known, err := c.nodes.Lookup(ctx, node)
	if err != nil {
		return nil, cephStatus(fmt.Errorf("looking up node %s: %w", node, err))
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "node %.100q is not registered: its node plugin is not running or has not sent a heartbeat recently", node)
	}
	vol, pool, release, err := c.lockVolume(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer release()
	if err := c.sparsifying(pool, vol); err != nil {
		return nil, err
	}

	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	if why := contextEncryptionMismatch(req.GetVolumeContext(), c.names.Volume(vol.Image, info.Metadata)); why != "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %s", id, why)
	}
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	want := attach.Record{Mode: mode, ReadOnly: req.GetReadonly() || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY || mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY}
	existing := attach.Records(info.Metadata, info.ID)
	resp := &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{attach.PublishContextNode: node}}
	// krbd ignores librbd's QoS limits: the node sets them in the pod's
	// cgroup from here.
	if qos := config.KernelLimitsOf(info.Metadata).String(); qos != "" {
		resp.PublishContext[config.PublishContextQoS] = qos
	}
	if have, ok := existing[node]; ok {
		if have == want {
			return resp, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "volume %s is attached to node %s as %s; detach it before attaching it as %s", id, node, have, want)
	}
	if why := attach.Conflict(node, want, isBlock(req.GetVolumeCapability()), existing); why != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s cannot be attached to node %s: %s", id, node, why)
	}
	releaseSlot, err := c.reserveSlot(ctx, n, id)
	if err != nil {
		return nil, err
	}
	defer releaseSlot()
	if err := c.backend.SetMetadata(ctx, pool, vol.Image, map[string]string{attach.MetaPrefix + node: want.Value(info.ID)}); err != nil {
		// A write Ceph refused or failed is no attachment: its index entry
		// goes too, with the controller's own credentials. One that timed
		// out may have landed, and keeps it (pruneStale drops it if not).
		if !errors.Is(err, rbd.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			if rerr := c.nodes.RemoveAttachment(ctx, node, id); rerr != nil {
				klog.ErrorS(rerr, "removing the index entry of a failed attach; it is pruned later", "volumeID", id, "node", node)
			}
		}
		return nil, cephStatus(err)
	}
	klog.V(2).InfoS("attached volume", "volumeID", id, "node", node, "as", want.String())
	return resp, nil
}

// ControllerUnpublishVolume removes the attachment record; a volume or node
// that is gone, or an attachment that is not there, is a success. A node
// that still has a single-node writer's image open is fenced first
// (fence.go).
func (c *Controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if c.nodes == nil {
		return nil, status.Error(codes.Unimplemented, "attachments need the node registry (--node-registry)")
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	// Any image a volume ID names, ours or a static volume's, may carry
	// our attachment records.
	if _, err := volid.DecodeVolume(id); err != nil {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	vol, pool, release, err := c.lockVolume(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer release()

	// The record goes first, then the index entry: a crash in between
	// leaves an entry the limit check finds stale.
	nodes := []string{node}
	info, err := c.stat(ctx, pool, vol)
	switch {
	case status.Code(err) == codes.NotFound:
	case err != nil:
		return nil, err
	default:
		var keys []string
		for n, rec := range attach.Records(info.Metadata, info.ID) {
			if node == "" { // no node: detach from all
				nodes = append(nodes, n)
			}
			if node != "" && n != node {
				continue
			}
			if attach.FencedAtDetach(rec) {
				if err := c.fence(ctx, pool, vol, id, n); err != nil {
					return nil, err
				}
			}
			keys = append(keys, attach.MetaPrefix+n)
		}
		if len(keys) > 0 {
			if err := c.backend.RemoveMetadata(ctx, pool, vol.Image, keys...); err != nil {
				return nil, cephStatus(err)
			}
			klog.V(2).InfoS("detached volume", "volumeID", id, "node", node)
		}
	}
	if err := c.unindex(ctx, id, nodes); err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
