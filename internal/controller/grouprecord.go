package controller

import (
	"context"
	"errors"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A group snapshot of one pool, and its record (records.Groups;
// groupsnap.go, steps 1 and 5) as the group snapshot calls read it and
// CSI reports it.

// groupSnap is one group snapshot of one pool.
type groupSnap struct {
	c    *Controller
	pool rbd.Pool
	id   volid.Group
	hash string // of the request name: names the group, record, members
}

func (c *Controller) newGroupSnap(pool rbd.Pool, clusterID, group string) *groupSnap {
	hash, _ := c.names.GroupHash(group)
	return &groupSnap{c: c, pool: pool, id: volid.Group{ClusterID: clusterID, Pool: pool.Name, Group: group}, hash: hash}
}

func (g *groupSnap) lockKey() string { return records.GroupLock(g.pool, g.hash) }

// read reads the record; none is a zero record.
func (g *groupSnap) read(ctx context.Context) (records.GroupRecord, error) {
	rec, err := g.c.groups.Read(ctx, g.pool, g.hash)
	return rec, g.recordStatus(err)
}

// readClaimed reads the record of a group snapshot whose name this call
// has just claimed.
func (g *groupSnap) readClaimed(ctx context.Context) (records.GroupRecord, error) {
	rec, err := g.c.groups.ReadClaimed(ctx, g.pool, g.hash)
	return rec, g.recordStatus(err)
}

func (g *groupSnap) recordStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, records.ErrCorruptRecord):
		return status.Errorf(codes.Internal, "the record of group snapshot %s is corrupt: %v", g.id, err)
	default:
		return cephStatus(err)
	}
}

// matchesRecord checks the snapshot IDs a CO sent with a group snapshot's
// ID (none: nothing to check).
func matchesRecord(r records.GroupRecord, ids []string, groupID string) error {
	if len(ids) == 0 {
		return nil
	}
	var own []string
	for _, m := range r.Members {
		own = append(own, m.Snapshot)
	}
	want := slices.Sorted(slices.Values(own))
	got := slices.Sorted(slices.Values(ids))
	if !slices.Equal(want, slices.Compact(got)) {
		return status.Errorf(codes.InvalidArgument, "the snapshot IDs sent are not the %d members of group snapshot %s", len(own), groupID)
	}
	return nil
}

// groupSnapshotOf is the group snapshot as CSI reports it.
func groupSnapshotOf(r records.GroupRecord, id volid.Group) *csi.VolumeGroupSnapshot {
	taken := timestamppb.New(r.Taken)
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: id.String(), CreationTime: taken, ReadyToUse: true}
	for _, m := range r.Members {
		out.Snapshots = append(out.Snapshots, &csi.Snapshot{
			SnapshotId: m.Snapshot, SourceVolumeId: m.Source, SizeBytes: m.Size,
			CreationTime: taken, ReadyToUse: true, GroupSnapshotId: id.String(),
		})
	}
	return out
}

// memberOfLiveGroup refuses to delete one member snapshot of a group
// snapshot that still exists: its group snapshot goes as a whole.
func (c *Controller) memberOfLiveGroup(ctx context.Context, pool rbd.Pool, snap volid.Snapshot) error {
	hash, ok := records.GroupOfSnap(snap.Snap)
	if !ok {
		return nil
	}
	exists, err := c.groups.Exists(ctx, pool, hash)
	if err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return cephStatus(err)
	}
	if exists {
		group := volid.Group{ClusterID: snap.ClusterID, Pool: snap.Pool, Group: c.names.GroupOf(hash)}
		return status.Errorf(codes.InvalidArgument, "snapshot %s belongs to group snapshot %s; delete the group snapshot (VolumeGroupSnapshot) instead", snap, group)
	}
	return nil
}
