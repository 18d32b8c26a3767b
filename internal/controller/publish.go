package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Nodes tells which nodes exist (internal/nodereg implements it).
type Nodes interface {
	Known(ctx context.Context, nodeID string) (bool, error)
}

// metaAttachPrefix + node ID records an attachment in the image metadata:
// Ceph itself knows where each volume is attached.
const metaAttachPrefix = "rbdcsi.attach/"

// PublishContextNode is the publish_context key naming the node the volume
// was attached to; NodeStageVolume checks the attachment in Ceph anyway.
const PublishContextNode = "rbdcsi.dev/attached-node"

// attachment is one node's record: its access mode and whether it writes.
type attachment struct {
	mode     csi.VolumeCapability_AccessMode_Mode
	readOnly bool
}

func (a attachment) String() string {
	rw := "rw"
	if a.readOnly {
		rw = "ro"
	}
	return rw + ":" + a.mode.String()
}

func parseAttachment(s string) (attachment, bool) {
	rw, mode, ok := strings.Cut(s, ":")
	m, known := csi.VolumeCapability_AccessMode_Mode_value[mode]
	if !ok || !known || (rw != "rw" && rw != "ro") {
		return attachment{}, false
	}
	return attachment{mode: csi.VolumeCapability_AccessMode_Mode(m), readOnly: rw == "ro"}, true
}

// attachments reads the attachment records from image metadata.
func attachments(meta map[string]string) map[string]attachment {
	out := map[string]attachment{}
	for k, v := range meta {
		if node, ok := strings.CutPrefix(k, metaAttachPrefix); ok {
			if a, ok := parseAttachment(v); ok {
				out[node] = a
			}
		}
	}
	return out
}

func attachedNodes(meta map[string]string) []string {
	var nodes []string
	for n := range attachments(meta) {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}

func singleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// conflict says why a new attachment cannot join the existing ones, or "".
// Single-node modes exclude every other node; a writer excludes every other
// node unless all are raw block multi-writers (the application then owns
// the coordination, as with a clustered filesystem).
func conflict(node string, want attachment, block bool, existing map[string]attachment) string {
	for other, a := range existing {
		if other == node {
			continue
		}
		switch {
		case singleNode(want.mode) || singleNode(a.mode):
			return fmt.Sprintf("it is attached to node %s, and access mode %s allows one node only", other, pick(singleNode(want.mode), want.mode, a.mode))
		case !want.readOnly && a.readOnly:
			return fmt.Sprintf("node %s has it attached read-only; a read-write attachment elsewhere would change data under it", other)
		case !want.readOnly && !a.readOnly && (want.mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER || a.mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER):
			return fmt.Sprintf("node %s writes to it already and access mode %s allows one writer", other, csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)
		case !want.readOnly || !a.readOnly:
			if !block {
				return fmt.Sprintf("node %s has it attached and a filesystem cannot be written from several nodes", other)
			}
		}
	}
	return ""
}

func pick[T any](first bool, a, b T) T {
	if first {
		return a
	}
	return b
}

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
	vol, err := volid.DecodeVolume(id)
	if err != nil || !isVolumeImage(vol.Image) {
		return nil, status.Errorf(codes.NotFound, "volume %.130q does not exist", id)
	}
	known, err := c.nodes.Known(ctx, node)
	if err != nil {
		return nil, cephStatus(fmt.Errorf("looking up node %s: %w", node, err))
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "node %.100q is not registered: its node plugin is not running or has not sent a heartbeat recently", node)
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets(), true)
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return nil, pending("volume " + id)
	}
	defer release()

	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	want := attachment{mode: mode, readOnly: req.GetReadonly() || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY || mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY}
	existing := attachments(info.Metadata)
	resp := &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishContextNode: node}}
	if have, ok := existing[node]; ok {
		if have == want {
			return resp, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "volume %s is attached to node %s as %s; detach it before attaching it as %s", id, node, have, want)
	}
	if why := conflict(node, want, isBlock(req.GetVolumeCapability()), existing); why != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s cannot be attached to node %s: %s", id, node, why)
	}
	if err := c.backend.SetMetadata(ctx, pool, vol.Image, map[string]string{metaAttachPrefix + node: want.String()}); err != nil {
		return nil, cephStatus(err)
	}
	klog.V(2).InfoS("attached volume", "volumeID", id, "node", node, "as", want.String())
	return resp, nil
}

// ControllerUnpublishVolume removes the attachment record; a volume or node
// that is gone, or an attachment that is not there, is a success.
func (c *Controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if c.nodes == nil {
		return nil, status.Error(codes.Unimplemented, "attachments need the node registry (--node-registry)")
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	vol, err := volid.DecodeVolume(id)
	if err != nil || !isVolumeImage(vol.Image) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets(), true)
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return nil, pending("volume " + id)
	}
	defer release()

	info, err := c.stat(ctx, pool, vol)
	if status.Code(err) == codes.NotFound {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for n := range attachments(info.Metadata) {
		if node == "" || n == node { // no node: detach from all
			keys = append(keys, metaAttachPrefix+n)
		}
	}
	if len(keys) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err := c.backend.RemoveMetadata(ctx, pool, vol.Image, keys...); err != nil {
		return nil, cephStatus(err)
	}
	klog.V(2).InfoS("detached volume", "volumeID", id, "node", node)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
