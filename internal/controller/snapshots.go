package controller

import (
	"context"
	"errors"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// CreateSnapshot takes an RBD snapshot of the source volume: copy-on-write,
// ready at once. It checks the request, finds the source's pool, and under
// the name's and the source's locks claims the name for its source, so
// the same name for another source is refused even across restarts, and
// takes the snapshot.
func (c *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	a, err := checkSnapshot(req)
	if err != nil {
		return nil, err
	}
	pool, err := c.pool(a.vol.ClusterID, a.vol.Pool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock(records.SnapshotNameLock(a.name), "vol/"+a.srcID)
	if !ok {
		return nil, pending("snapshot " + a.name)
	}
	defer release()
	snap, info, err := c.takeSnapshot(ctx, pool, a)
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(snap, a.srcID, info)}, nil
}

// snapshotArgs is a CreateSnapshot request, checked.
type snapshotArgs struct {
	name, srcID string
	vol         volid.Volume // the source: ours or a static volume's image (static.go)
	owner       config.SnapshotOwner
}

// checkSnapshot checks what a CreateSnapshot asks for, before any Ceph call.
func checkSnapshot(req *csi.CreateSnapshotRequest) (snapshotArgs, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	if name == "" {
		return snapshotArgs{}, status.Error(codes.InvalidArgument, "snapshot name is missing")
	}
	if len(name) > maxNameLen {
		return snapshotArgs{}, status.Errorf(codes.InvalidArgument, "snapshot name is longer than %d bytes", maxNameLen)
	}
	if srcID == "" {
		return snapshotArgs{}, status.Error(codes.InvalidArgument, "source volume ID is missing")
	}
	for k := range req.GetParameters() {
		if !strings.HasPrefix(k, config.ReservedPrefix) {
			return snapshotArgs{}, status.Errorf(codes.InvalidArgument, "unknown snapshot parameter %.60q", k)
		}
	}
	owner, err := config.ParseSnapshotOwner(req.GetParameters())
	if err != nil {
		return snapshotArgs{}, status.Error(codes.InvalidArgument, err.Error())
	}
	vol, err := volid.DecodeVolume(srcID)
	if err != nil {
		return snapshotArgs{}, status.Errorf(codes.NotFound, "source volume %.130q does not exist", srcID)
	}
	return snapshotArgs{name: name, srcID: srcID, vol: vol, owner: owner}, nil
}

// takeSnapshot claims the name and takes the snapshot, or finds the one an
// earlier attempt took; the caller holds the name's and the source's locks.
func (c *Controller) takeSnapshot(ctx context.Context, pool rbd.Pool, a snapshotArgs) (volid.Snapshot, rbd.SnapInfo, error) {
	fam, err := c.family(ctx, pool, a.vol)
	if err != nil {
		return volid.Snapshot{}, rbd.SnapInfo{}, err
	}
	snap := volid.Snapshot{ClusterID: a.vol.ClusterID, Pool: a.vol.Pool, ImageID: fam.ID, Snap: c.names.Snap(a.name)}
	if err := snap.Validate(); err != nil {
		return snap, rbd.SnapInfo{}, status.Errorf(codes.Internal, "snapshot ID: %v", err)
	}
	if _, taken := findSnap(fam.Snaps, snap.Snap); !taken {
		if err := notPrimary(fam, "volume "+a.srcID); err != nil {
			return snap, rbd.SnapInfo{}, err
		}
	}
	if err := c.claimSnapshot(ctx, pool, snap.Snap, fam.ID, a.name); err != nil {
		return snap, rbd.SnapInfo{}, err
	}
	c.opts.Fault("CreateSnapshot:claimed")
	if s, ok := findSnap(fam.Snaps, snap.Snap); ok {
		if err := c.nameSnapshot(ctx, pool, fam, snap.Snap, a.owner); err != nil {
			return snap, s, err
		}
		c.settleClaim(ctx, pool, snap.Snap)
		return snap, s, nil
	}
	if len(fam.Snaps) >= c.opts.MaxSnapshotsPerImage {
		if c.backend.Unclaim(ctx, pool, records.ClaimObject(snap.Snap)) == nil {
			c.settleClaim(ctx, pool, snap.Snap)
		}
		return snap, rbd.SnapInfo{}, status.Errorf(codes.ResourceExhausted, "volume %s has %d snapshots, the most this driver allows (--max-snapshots-per-image)", a.srcID, len(fam.Snaps))
	}
	if err := c.backend.CreateSnapshot(ctx, pool, a.vol.Image, snap.Snap); err != nil && !errors.Is(err, rbd.ErrExists) {
		return snap, rbd.SnapInfo{}, c.writeStatus(pool, err)
	}
	if fam, err = c.family(ctx, pool, a.vol); err != nil {
		return snap, rbd.SnapInfo{}, err
	}
	s, ok := findSnap(fam.Snaps, snap.Snap)
	if !ok {
		return snap, s, status.Errorf(codes.Aborted, "snapshot %s vanished while it was being created; retry", a.name)
	}
	if err := c.nameSnapshot(ctx, pool, fam, snap.Snap, a.owner); err != nil {
		return snap, s, err
	}
	c.settleClaim(ctx, pool, snap.Snap)
	klog.V(2).InfoS("created snapshot", "name", a.name, "snapshotID", snap.String(), "source", a.srcID)
	return snap, s, nil
}

// DeleteSnapshot removes the RBD snapshot. Clones made from it keep
// working: RBD keeps the data in its trash namespace until the last clone
// is gone. A deleted source volume kept for this snapshot goes with it.
func (c *Controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	snap, err := volid.DecodeSnapshot(id)
	if err != nil || !records.IsSnap(snap.Snap) {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	pool, err := c.pool(snap.ClusterID, snap.Pool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if err := c.memberOfLiveGroup(ctx, pool, snap); err != nil {
		return nil, err
	}
	if err := c.deleteSnapshot(ctx, pool, id, snap); err != nil {
		return nil, err
	}
	klog.V(2).InfoS("deleted snapshot", "snapshotID", id)
	// Only now, with the locks released: the sweep skips what a request
	// holds, and this one held the image it may have left to reclaim.
	c.up.After(pool)
	return &csi.DeleteSnapshotResponse{}, nil
}

// deleteSnapshot removes the snapshot and its claim under the snapshot's
// and its image's locks, and reclaims the image if it was kept only for it.
func (c *Controller) deleteSnapshot(ctx context.Context, pool rbd.Pool, id string, snap volid.Snapshot) error {
	release, ok := c.locks.TryLock("snapid/" + id)
	if !ok {
		return pending("snapshot " + id)
	}
	defer release()

	// One change at a time to an image's snapshots and clones (see
	// finishRemoval).
	releaseParent, err := c.waitLock(ctx, records.ParentLock(snap.Pool, snap.ImageID))
	if err != nil {
		return err
	}
	defer releaseParent()
	err = c.backend.RemoveSnapshot(ctx, pool, snap.ImageID, snap.Snap)
	if err != nil && !errors.Is(err, rbd.ErrNotFound) && !errors.Is(err, rbd.ErrPoolNotFound) {
		if errors.Is(err, rbd.ErrBusy) {
			return status.Errorf(codes.FailedPrecondition, "snapshot %s is in use; retry later", id)
		}
		return cephStatus(err)
	}
	if err := c.backend.Unclaim(ctx, pool, records.ClaimObject(snap.Snap)); err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return cephStatus(err)
	}
	fam, err := c.unnameSnapshot(ctx, pool, snap)
	if err != nil || fam == nil {
		return err // or the image is gone
	}
	if err := c.up.ReclaimFrom(ctx, pool, fam); err != nil {
		return cephStatus(err)
	}
	return nil
}

func snapshotOf(id volid.Snapshot, srcID string, s rbd.SnapInfo) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     id.String(),
		SourceVolumeId: srcID,
		SizeBytes:      int64(s.Size),
		CreationTime:   timestamppb.New(s.Created),
		ReadyToUse:     true,
	}
}
