package controller

import (
	"context"
	"errors"
	"sort"
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
// ready at once. The name is claimed for its source first, so the same
// name for another source is refused even across restarts.
func (c *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot name is missing")
	}
	if len(name) > maxNameLen {
		return nil, status.Errorf(codes.InvalidArgument, "snapshot name is longer than %d bytes", maxNameLen)
	}
	if srcID == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume ID is missing")
	}
	for k := range req.GetParameters() {
		if !strings.HasPrefix(k, config.ReservedPrefix) {
			return nil, status.Errorf(codes.InvalidArgument, "unknown snapshot parameter %.60q", k)
		}
	}
	owner, err := config.ParseSnapshotOwner(req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Our volumes and static volumes' images alike (static.go).
	vol, err := volid.DecodeVolume(srcID)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "source volume %.130q does not exist", srcID)
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock(records.SnapshotNameLock(name), "vol/"+srcID)
	if !ok {
		return nil, pending("snapshot " + name)
	}
	defer release()

	fam, err := c.family(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	snap := volid.Snapshot{ClusterID: vol.ClusterID, Pool: vol.Pool, ImageID: fam.ID, Snap: c.names.Snap(name)}
	if err := snap.Validate(); err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot ID: %v", err)
	}
	if err := c.indexClaim(ctx, pool, snap.Snap, fam.ID, name); err != nil {
		return nil, err
	}
	holder, err := c.backend.Claim(ctx, pool, records.ClaimObject(snap.Snap), fam.ID)
	if err != nil {
		return nil, cephStatus(err)
	}
	if holder != fam.ID {
		c.settleClaim(ctx, pool, snap.Snap)
		return nil, status.Errorf(codes.AlreadyExists, "snapshot name %q is already used for another source volume", name)
	}
	c.opts.Fault("CreateSnapshot:claimed")
	if s, ok := findSnap(fam.Snaps, snap.Snap); ok {
		if err := c.nameSnapshot(ctx, pool, fam, snap.Snap, owner); err != nil {
			return nil, err
		}
		c.settleClaim(ctx, pool, snap.Snap)
		return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(snap, srcID, s)}, nil
	}
	if len(fam.Snaps) >= c.opts.MaxSnapshotsPerImage {
		if c.backend.Unclaim(ctx, pool, records.ClaimObject(snap.Snap)) == nil {
			c.settleClaim(ctx, pool, snap.Snap)
		}
		return nil, status.Errorf(codes.ResourceExhausted, "volume %s has %d snapshots, the most this driver allows (--max-snapshots-per-image)", srcID, len(fam.Snaps))
	}
	if err := c.backend.CreateSnapshot(ctx, pool, vol.Image, snap.Snap); err != nil && !errors.Is(err, rbd.ErrExists) {
		return nil, c.writeStatus(pool, err)
	}
	fam, err = c.family(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	s, ok := findSnap(fam.Snaps, snap.Snap)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "snapshot %s vanished while it was being created; retry", name)
	}
	if err := c.nameSnapshot(ctx, pool, fam, snap.Snap, owner); err != nil {
		return nil, err
	}
	c.settleClaim(ctx, pool, snap.Snap)
	klog.V(2).InfoS("created snapshot", "name", name, "snapshotID", snap.String(), "source", srcID)
	return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(snap, srcID, s)}, nil
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
	pool, err := c.pool(snap.ClusterID, snap.Pool, req.GetSecrets(), false)
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
	c.sweeper.after(pool)
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
	return c.reclaimFrom(ctx, pool, fam)
}

// GetSnapshot reports one snapshot.
func (c *Controller) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	entries, err := c.snapshotByID(ctx, id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, status.Errorf(codes.NotFound, "snapshot %.130q does not exist", id)
	}
	return &csi.GetSnapshotResponse{Snapshot: entries[0].Snapshot}, nil
}

// ListSnapshots pages through snapshots in snapshot ID order, filtered by
// snapshot ID or source volume ID; the token is the last ID returned.
func (c *Controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries must not be negative, got %d", req.GetMaxEntries())
	}
	after := req.GetStartingToken()
	if after != "" {
		if _, err := volid.DecodeSnapshot(after); err != nil {
			return nil, status.Errorf(codes.Aborted, "starting token %.130q was not returned by this driver; start the listing again", after)
		}
	}
	var entries []*csi.ListSnapshotsResponse_Entry
	var err error
	switch {
	case req.GetSnapshotId() != "":
		entries, err = c.snapshotByID(ctx, req.GetSnapshotId(), req.GetSecrets())
	case req.GetSourceVolumeId() != "":
		entries, err = c.snapshotsOfVolume(ctx, req.GetSourceVolumeId(), req.GetSecrets())
	default:
		entries, err = c.allSnapshots(ctx, req.GetSecrets())
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Snapshot.SnapshotId < entries[j].Snapshot.SnapshotId })
	start := sort.Search(len(entries), func(i int) bool { return entries[i].Snapshot.SnapshotId > after })
	resp := &csi.ListSnapshotsResponse{Entries: entries[start:]}
	if n := int(req.GetMaxEntries()); n > 0 && len(resp.Entries) > n {
		resp.Entries = resp.Entries[:n]
		resp.NextToken = resp.Entries[n-1].Snapshot.SnapshotId
	}
	return resp, nil
}

func (c *Controller) snapshotByID(ctx context.Context, id string, secrets map[string]string) ([]*csi.ListSnapshotsResponse_Entry, error) {
	snap, err := volid.DecodeSnapshot(id)
	if err != nil {
		return nil, nil
	}
	pool, err := c.pool(snap.ClusterID, snap.Pool, secrets, true)
	if err != nil {
		return nil, err
	}
	fam, err := c.backend.StatFamily(ctx, pool, "", snap.ImageID)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, cephStatus(err)
	}
	return c.snapshotEntries(snap.ClusterID, snap.Pool, fam, snap.Snap), nil
}

func (c *Controller) snapshotsOfVolume(ctx context.Context, id string, secrets map[string]string) ([]*csi.ListSnapshotsResponse_Entry, error) {
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return nil, nil
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, secrets, true)
	if err != nil {
		return nil, err
	}
	fam, err := c.family(ctx, pool, vol)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c.snapshotEntries(vol.ClusterID, vol.Pool, fam, ""), nil
}

// allSnapshots walks every volume image, live or kept for its snapshots,
// in every pool the credentials can read.
func (c *Controller) allSnapshots(ctx context.Context, secrets map[string]string) ([]*csi.ListSnapshotsResponse_Entry, error) {
	var out []*csi.ListSnapshotsResponse_Entry
	for _, cluster := range c.clusters.All() {
		base, err := c.pool(cluster.ClusterID, "", secrets, true)
		if err != nil {
			return nil, err
		}
		pools, err := c.backend.ListPools(ctx, base.MonHost, base.Cred)
		if err != nil {
			return nil, cephStatus(err)
		}
		for _, poolName := range pools {
			if volid.ValidPool(poolName) != nil {
				continue
			}
			pool := base
			pool.Name = poolName
			names, err := c.backend.ListImages(ctx, pool)
			if errors.Is(err, rbd.ErrPermission) || errors.Is(err, rbd.ErrPoolNotFound) {
				continue
			}
			if err != nil {
				return nil, cephStatus(err)
			}
			for _, n := range names {
				if _, hidden := c.names.HiddenID(n); !hidden && !c.names.IsVolumeImage(n) {
					continue
				}
				fam, err := c.backend.StatFamily(ctx, pool, n, "")
				if errors.Is(err, rbd.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, cephStatus(err)
				}
				out = append(out, c.snapshotEntries(cluster.ClusterID, poolName, fam, "")...)
			}
		}
	}
	return out, nil
}

// snapshotEntries lists the CSI snapshots of an image (only the one named
// only, if set).
func (c *Controller) snapshotEntries(clusterID, pool string, fam rbd.Family, only string) []*csi.ListSnapshotsResponse_Entry {
	v := c.names.Volume(fam.Name, fam.Metadata)
	if v.Name == "" {
		return nil
	}
	srcID := volid.Volume{ClusterID: clusterID, Pool: pool, Image: c.names.OriginalImage(v)}.String()
	var out []*csi.ListSnapshotsResponse_Entry
	for _, s := range fam.Snaps {
		if !records.IsSnap(s.Name) || (only != "" && s.Name != only) {
			continue
		}
		id := volid.Snapshot{ClusterID: clusterID, Pool: pool, ImageID: fam.ID, Snap: s.Name}
		snap := snapshotOf(id, srcID, s)
		if _, member := records.GroupOfSnap(s.Name); member {
			snap.GroupSnapshotId = v.GroupSnapshot
		}
		out = append(out, &csi.ListSnapshotsResponse_Entry{Snapshot: snap})
	}
	return out
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

func findSnap(snaps []rbd.SnapInfo, name string) (rbd.SnapInfo, bool) {
	for _, s := range snaps {
		if s.Name == name {
			return s, true
		}
	}
	return rbd.SnapInfo{}, false
}

// family returns a live volume image with its relations, or NotFound: one
// named like ours must be finished, a static volume's need only exist.
func (c *Controller) family(ctx context.Context, pool rbd.Pool, vol volid.Volume) (rbd.Family, error) {
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && c.names.Volume(vol.Image, fam.Metadata).State == records.Unfinished) {
		return rbd.Family{}, status.Errorf(codes.NotFound, "volume %s does not exist", vol)
	}
	if err != nil {
		return rbd.Family{}, cephStatus(err)
	}
	return fam, nil
}
