package controller

import (
	"context"
	"errors"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

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
// snapshot ID or source volume ID; the token is the last ID returned. An
// unfiltered listing reads every image at its first page; the pages after
// it take the entries that walk left (pages.go).
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
	all := req.GetSnapshotId() == "" && req.GetSourceVolumeId() == ""
	scope := pagesScope(req.GetSecrets())
	entries, ok := c.snapPages.get(scope, after)
	if !ok || after == "" || !all {
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
		entries = entries[sort.Search(len(entries), func(i int) bool { return entries[i].Snapshot.SnapshotId > after }):]
	}
	resp := &csi.ListSnapshotsResponse{Entries: entries}
	if n := int(req.GetMaxEntries()); n > 0 && len(resp.Entries) > n {
		resp.Entries = entries[:n:n]
		resp.NextToken = resp.Entries[n-1].Snapshot.SnapshotId
		if all {
			c.snapPages.put(scope, resp.NextToken, entries[n:])
		}
	}
	if ok && all && resp.NextToken == "" {
		c.snapPages.drop(scope, after)
	}
	return resp, nil
}

func (c *Controller) snapshotByID(ctx context.Context, id string, secrets map[string]string) ([]*csi.ListSnapshotsResponse_Entry, error) {
	snap, err := volid.DecodeSnapshot(id)
	if err != nil {
		return nil, nil
	}
	pool, err := c.pool(snap.ClusterID, snap.Pool, secrets)
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
	pool, err := c.pool(vol.ClusterID, vol.Pool, secrets)
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
// in every pool the credentials can read, listReads images at a time.
func (c *Controller) allSnapshots(ctx context.Context, secrets map[string]string) ([]*csi.ListSnapshotsResponse_Entry, error) {
	var out []*csi.ListSnapshotsResponse_Entry
	for _, cl := range c.clusters.All() {
		base, err := c.pool(cl.ClusterID, "", secrets)
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
			var own []string
			for _, n := range names {
				if _, hidden := c.names.HiddenID(n); hidden || c.names.IsVolumeImage(n) {
					own = append(own, n)
				}
			}
			found := make([][]*csi.ListSnapshotsResponse_Entry, len(own))
			err = readAll(ctx, len(own), func(ctx context.Context, i int) error {
				fam, err := c.backend.StatFamily(ctx, pool, own[i], "")
				if errors.Is(err, rbd.ErrNotFound) {
					return nil
				}
				if err != nil {
					return cephStatus(err)
				}
				found[i] = c.snapshotEntries(cl.ClusterID, poolName, fam, "")
				return nil
			})
			if err != nil {
				return nil, err
			}
			for _, f := range found {
				out = append(out, f...)
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
