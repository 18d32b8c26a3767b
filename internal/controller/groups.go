package controller

import (
	"context"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// maxGroupMembers bounds the volumes of one group snapshot: member
// snapshot names number them in two digits (records.Names).
const maxGroupMembers = 64

// GroupSnapshots is nil when the backend can take group snapshots and
// restore from them (librbd of Squid 19 or newer), or says why not.
func (c *Controller) GroupSnapshots() error { return c.backend.GroupSnapshots() }

// GroupController is the CSI GroupController service of a Controller,
// served only where GroupSnapshots is nil.
type GroupController struct {
	csi.UnimplementedGroupControllerServer
	c *Controller
}

// GroupController returns the Controller's GroupController service.
func (c *Controller) GroupController() *GroupController { return &GroupController{c: c} }

// GroupControllerGetCapabilities advertises group snapshots where the
// library has what they need.
func (g *GroupController) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	resp := &csi.GroupControllerGetCapabilitiesResponse{}
	if g.c.GroupSnapshots() == nil {
		resp.Capabilities = []*csi.GroupControllerServiceCapability{{
			Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
				Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT,
			}},
		}}
	}
	return resp, nil
}

// CreateVolumeGroupSnapshot snapshots the volumes at one instant, through
// a temporary RBD group (groupsnap.go), and returns one ordinary snapshot
// per volume, each restorable copy-on-write.
func (g *GroupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	c := g.c
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "group snapshot name is missing")
	}
	if len(name) > maxNameLen {
		return nil, status.Errorf(codes.InvalidArgument, "group snapshot name is longer than %d bytes", maxNameLen)
	}
	ids := slices.Clone(req.GetSourceVolumeIds())
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "source volume IDs are missing")
	}
	if len(ids) > maxGroupMembers {
		return nil, status.Errorf(codes.InvalidArgument, "a group snapshot takes at most %d volumes, got %d", maxGroupMembers, len(ids))
	}
	for k := range req.GetParameters() {
		if !strings.HasPrefix(k, config.ReservedPrefix) {
			return nil, status.Errorf(codes.InvalidArgument, "unknown group snapshot parameter %.60q", k)
		}
	}
	slices.Sort(ids)
	var vols []volid.Volume
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return nil, status.Errorf(codes.InvalidArgument, "source volume %.130q is listed twice", id)
		}
		vol, err := volid.DecodeVolume(id)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "source volume %.130q does not exist", id)
		}
		if len(vols) > 0 && (vol.ClusterID != vols[0].ClusterID || vol.Pool != vols[0].Pool) {
			return nil, status.Errorf(codes.InvalidArgument, "volumes %s and %s are in different pools; an RBD group snapshot takes the volumes of one pool of one cluster", vols[0], vol)
		}
		vols = append(vols, vol)
	}
	if err := c.GroupSnapshots(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "group snapshots: %v", err)
	}
	pool, err := c.pool(vols[0].ClusterID, vols[0].Pool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	gs := c.newGroupSnap(pool, vols[0].ClusterID, c.names.Group(name))
	keys := []string{gs.lockKey()}
	for _, id := range ids {
		keys = append(keys, "vol/"+id)
	}
	release, ok := c.locks.TryLock(keys...)
	if !ok {
		return nil, pending("group snapshot " + name)
	}
	defer release()
	rec, err := gs.create(ctx, name, vols)
	if err != nil {
		return nil, err
	}
	klog.V(2).InfoS("created group snapshot", "name", name, "groupSnapshotID", gs.id.String(), "volumes", len(vols))
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: groupSnapshotOf(rec, gs.id)}, nil
}

// DeleteVolumeGroupSnapshot deletes the member snapshots and the record
// of the group snapshot.
func (g *GroupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	c, id := g.c, req.GetGroupSnapshotId()
	gs, err := c.groupSnapOf(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if gs == nil {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil // not ours: gone
	}
	release, ok := c.locks.TryLock(gs.lockKey())
	if !ok {
		return nil, pending("group snapshot " + id)
	}
	defer release()
	if err := gs.delete(ctx, req.GetSnapshotIds()); err != nil {
		return nil, err
	}
	klog.V(2).InfoS("deleted group snapshot", "groupSnapshotID", id)
	c.up.After(gs.pool)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// GetVolumeGroupSnapshot reports a group snapshot from its record.
func (g *GroupController) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	id := req.GetGroupSnapshotId()
	gs, err := g.c.groupSnapOf(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if gs == nil {
		return nil, status.Errorf(codes.NotFound, "group snapshot %.130q does not exist", id)
	}
	rec, err := gs.read(ctx)
	if err != nil {
		return nil, err
	}
	if !rec.Complete() {
		return nil, status.Errorf(codes.NotFound, "group snapshot %s does not exist", id)
	}
	if err := matchesRecord(rec, req.GetSnapshotIds(), id); err != nil {
		return nil, err
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: groupSnapshotOf(rec, gs.id)}, nil
}

// groupSnapOf is the group snapshot an ID names, in its pool with the
// call's credentials; nil (and no error) for an ID that is not one of
// this instance's.
func (c *Controller) groupSnapOf(id string, secrets map[string]string) (*groupSnap, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "group snapshot ID is missing")
	}
	gid, err := volid.DecodeGroup(id)
	if err != nil || !c.names.IsGroup(gid.Group) {
		return nil, nil
	}
	pool, err := c.pool(gid.ClusterID, gid.Pool, secrets)
	if err != nil {
		return nil, err
	}
	return c.newGroupSnap(pool, gid.ClusterID, gid.Group), nil
}
