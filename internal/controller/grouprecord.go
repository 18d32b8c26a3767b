package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A group snapshot's record (groupsnap.go, step 1 and 5): the claim of its
// name, holding the sorted source volume IDs, with the rest in its omap.

// groupRecordPrefix + the group's hash names a group snapshot's record.
const groupRecordPrefix = "rbdcsi.vgs."

// Omap keys of a group snapshot's record.
const (
	recName    = "name"    // the request name
	recStarted = "started" // unix seconds of the first attempt
	recTaken   = "taken"   // unix nanoseconds of the RBD group snapshot
	recMembers = "members" // JSON []groupMember, written last
)

// groupRecordObject names the record of the group snapshot of hash.
func (c *Controller) groupRecordObject(hash string) string {
	return c.names.object(groupRecordPrefix + hash)
}

// groupMember is one member snapshot as the record keeps it.
type groupMember struct {
	Snapshot string `json:"snapshot"`
	Source   string `json:"source"`
	Size     int64  `json:"size"`
}

// groupRecord is what the record holds; a zero one: no record.
type groupRecord struct {
	exists  bool
	name    string
	started time.Time
	taken   time.Time
	members []groupMember // nil until step 5
}

func (r groupRecord) complete() bool { return r.members != nil }

// read reads the record; none is a zero groupRecord.
func (g *groupSnap) read(ctx context.Context) (groupRecord, error) {
	_, ok, err := g.c.backend.ClaimHolder(ctx, g.pool, g.record())
	if errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && !ok) {
		return groupRecord{}, nil
	}
	if err != nil {
		return groupRecord{}, cephStatus(err)
	}
	return g.readOmap(ctx)
}

// readOmap reads the omap of a record known to exist.
func (g *groupSnap) readOmap(ctx context.Context) (groupRecord, error) {
	kv, err := g.c.backend.ListOmap(ctx, g.pool, g.record(), "")
	if err != nil {
		return groupRecord{}, cephStatus(err)
	}
	r := groupRecord{exists: true, name: kv[recName]}
	if s, err := strconv.ParseInt(kv[recStarted], 10, 64); err == nil {
		r.started = time.Unix(s, 0)
	}
	if ns, err := strconv.ParseInt(kv[recTaken], 10, 64); err == nil {
		r.taken = time.Unix(0, ns)
	}
	if m, ok := kv[recMembers]; ok {
		if err := json.Unmarshal([]byte(m), &r.members); err != nil || r.members == nil {
			return groupRecord{}, status.Errorf(codes.Internal, "the record of group snapshot %s is corrupt: %v", g.id, err)
		}
	}
	return r, nil
}

// matches checks the snapshot IDs a CO sent with a group snapshot's ID
// (none: nothing to check).
func (r groupRecord) matches(ids []string, groupID string) error {
	if len(ids) == 0 {
		return nil
	}
	var own []string
	for _, m := range r.members {
		own = append(own, m.Snapshot)
	}
	want := slices.Sorted(slices.Values(own))
	got := slices.Sorted(slices.Values(ids))
	if !slices.Equal(want, slices.Compact(got)) {
		return status.Errorf(codes.InvalidArgument, "the snapshot IDs sent are not the %d members of group snapshot %s", len(own), groupID)
	}
	return nil
}

// csi is the group snapshot as CSI reports it.
func (r groupRecord) csi(id volid.Group) *csi.VolumeGroupSnapshot {
	taken := timestamppb.New(r.taken)
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: id.String(), CreationTime: taken, ReadyToUse: true}
	for _, m := range r.members {
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
	hash, ok := groupOfSnap(snap.Snap)
	if !ok {
		return nil
	}
	_, exists, err := c.backend.ClaimHolder(ctx, pool, c.groupRecordObject(hash))
	if err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return cephStatus(err)
	}
	if exists {
		group := volid.Group{ClusterID: snap.ClusterID, Pool: snap.Pool, Group: c.names.groupOf(hash)}
		return status.Errorf(codes.InvalidArgument, "snapshot %s belongs to group snapshot %s; delete the group snapshot (VolumeGroupSnapshot) instead", snap, group)
	}
	return nil
}
