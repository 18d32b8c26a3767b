package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A group snapshot is made in steps, each of which a retry finds done:
//
//  1. claim the name: a RADOS object (the record) holding the sorted
//     source volume IDs, with the request name and start time in its omap;
//  2. make the RBD group csi-vgs-<hash> and add the volumes' images;
//  3. take the group snapshot (atomic across the images);
//  4. clone each image's snapshot in it, by snapshot ID, into a member
//     image csi-vgs-<hash>-<i>, marked with the group snapshot ID last,
//     and take the member snapshot csi-snap-<hash>-<i> of it;
//  5. record the members: from here on the group snapshot exists;
//  6. rename each member image to a hidden image (csi-del-<ID>), kept for
//     its snapshot like a deleted volume's, and remove the group, its
//     snapshot (which RBD keeps in its trash while the members need it)
//     and its images' membership.
//
// A failure before 5 rolls everything back, record first; a crash leaves
// the RBD group, which the upkeep's sweep finds: it completes 6 for a recorded
// group snapshot and rolls back an unrecorded one older than an interval.
// Deleting a member snapshot reclaims its hidden image like any other.

// groupSnapName is the one snapshot taken of each temporary RBD group.
const groupSnapName = "snap"

// create runs the steps, or answers from the record of an earlier attempt.
func (g *groupSnap) create(ctx context.Context, name string, vols []volid.Volume) (records.GroupRecord, error) {
	ids := make([]string, len(vols))
	for i, v := range vols {
		ids[i] = v.String()
	}
	sources := strings.Join(ids, "\n")
	holder, err := g.c.groups.Claim(ctx, g.pool, g.hash, sources)
	if err != nil {
		return records.GroupRecord{}, cephStatus(err)
	}
	if holder != sources {
		return records.GroupRecord{}, status.Errorf(codes.AlreadyExists, "group snapshot name %q is already used for another set of volumes", name)
	}
	rec, err := g.readClaimed(ctx)
	if err != nil {
		return records.GroupRecord{}, err
	}
	if rec.Name != "" && rec.Name != name {
		return records.GroupRecord{}, status.Errorf(codes.AlreadyExists, "group snapshot name %q is already used for another set of volumes", name)
	}
	if rec.Complete() {
		return rec, g.finish(ctx, rec)
	}
	if rec.Name == "" {
		rec.Name, rec.Started = name, time.Now()
		if err := g.c.groups.SetStarted(ctx, g.pool, g.hash, name, rec.Started); err != nil {
			return records.GroupRecord{}, g.failed(cephStatus(err))
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:claimed")
	if rec, err = g.take(ctx, rec, vols); err != nil {
		return records.GroupRecord{}, g.failed(err)
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:recorded")
	return rec, g.finish(ctx, rec)
}

// failed rolls back what the attempt made, so that a failed create leaves
// no member snapshots behind, and returns err.
func (g *groupSnap) failed(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rerr := g.rollback(ctx); rerr != nil {
		klog.ErrorS(rerr, "rolling back a failed group snapshot; the sweep finishes it", "pool", g.pool.Name, "group", g.id.Group)
	}
	return err
}

// take runs steps 2 to 5.
func (g *groupSnap) take(ctx context.Context, rec records.GroupRecord, vols []volid.Volume) (records.GroupRecord, error) {
	b, group := g.c.backend, g.id.Group
	fams := make([]rbd.Family, len(vols))
	for i, v := range vols {
		fam, err := g.c.family(ctx, g.pool, v)
		if err != nil {
			return rec, err
		}
		fams[i] = fam
	}
	if err := b.CreateGroup(ctx, g.pool, group); err != nil && !errors.Is(err, rbd.ErrExists) {
		return rec, cephStatus(err)
	}
	for _, v := range vols {
		err := b.AddToGroup(ctx, g.pool, group, v.Image)
		switch {
		case errors.Is(err, rbd.ErrExists):
			return rec, status.Errorf(codes.FailedPrecondition, "volume %s is in another RBD group already, and an image can be in one group only: %v", v, err)
		case errors.Is(err, rbd.ErrNotFound):
			return rec, status.Errorf(codes.NotFound, "volume %s does not exist", v)
		case err != nil:
			return rec, cephStatus(err)
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:grouped")
	snap, err := b.SnapshotGroup(ctx, g.pool, group, groupSnapName)
	if err != nil {
		return rec, g.c.writeStatus(g.pool, err)
	}
	if rec.Taken.IsZero() {
		rec.Taken = time.Now()
		if err := g.c.groups.SetTaken(ctx, g.pool, g.hash, rec.Taken); err != nil {
			return rec, cephStatus(err)
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:snapshotted")
	members := make([]records.GroupMember, len(vols))
	for i, v := range vols {
		at := slices.IndexFunc(snap.Members, func(m rbd.GroupMember) bool { return m.Image == v.Image })
		if at < 0 {
			return rec, status.Errorf(codes.Aborted, "group snapshot of %s lacks volume %s; retry", group, v)
		}
		if members[i], err = g.member(ctx, i, v, fams[i], snap.Members[at].SnapID); err != nil {
			return rec, err
		}
	}
	if err := g.c.groups.SetMembers(ctx, g.pool, g.hash, members); err != nil {
		return rec, cephStatus(err)
	}
	rec.Members = members
	return rec, nil
}

// member makes member i: the clone of the volume's image snapshot in the
// group snapshot, and the member snapshot of it.
func (g *groupSnap) member(ctx context.Context, i int, v volid.Volume, fam rbd.Family, snapID uint64) (records.GroupMember, error) {
	b := g.c.backend
	image, snap := g.c.names.GroupMember(g.hash, i), g.c.names.GroupMemberSnap(g.hash, i)
	info, err := b.Stat(ctx, g.pool, image)
	if err == nil && g.c.names.Volume(image, info.Metadata).GroupSnapshot != g.id.String() {
		// Unfinished by a crash: no marker yet.
		if err := b.RemoveImage(ctx, g.pool, image); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return records.GroupMember{}, cephStatus(err)
		}
		err = rbd.ErrNotFound
	}
	if errors.Is(err, rbd.ErrNotFound) {
		depth := g.c.names.Volume(v.Image, fam.Metadata).Depth
		spec := rbd.CloneSpec{
			ParentImage: v.Image, ParentSnapID: snapID,
			DropMetadataPrefixes: records.GroupMemberDrops(),
			ImageSpec: rbd.ImageSpec{
				Features: config.SingleWriterFeatures(),
				Metadata: records.GroupMemberMetadata(depth+1, g.id.String()),
				Marker:   records.GroupMemberMarker,
			},
		}
		if err := b.Clone(ctx, g.pool, g.pool, image, spec); err != nil {
			return records.GroupMember{}, g.c.writeStatus(g.pool, err)
		}
		g.c.opts.Fault("CreateVolumeGroupSnapshot:cloned")
	} else if err != nil {
		return records.GroupMember{}, cephStatus(err)
	}
	if err := b.CreateSnapshot(ctx, g.pool, image, snap); err != nil && !errors.Is(err, rbd.ErrExists) {
		return records.GroupMember{}, g.c.writeStatus(g.pool, err)
	}
	mfam, err := b.StatFamily(ctx, g.pool, image, "")
	if err != nil {
		return records.GroupMember{}, cephStatus(err)
	}
	id := volid.Snapshot{ClusterID: g.id.ClusterID, Pool: g.pool.Name, ImageID: mfam.ID, Snap: snap}
	if err := id.Validate(); err != nil {
		return records.GroupMember{}, status.Errorf(codes.Internal, "member snapshot ID: %v", err)
	}
	return records.GroupMember{Snapshot: id.String(), Source: v.String(), Size: int64(mfam.Size)}, nil
}

// finish runs step 6 for a recorded group snapshot.
func (g *groupSnap) finish(ctx context.Context, rec records.GroupRecord) error {
	if err := g.c.up.FinishGroup(ctx, g.pool, g.id.Group, rec); err != nil {
		return cephStatus(err)
	}
	return nil
}

// rollback undoes an unrecorded group snapshot (upkeep.RollbackGroup).
func (g *groupSnap) rollback(ctx context.Context) error {
	return g.c.up.RollbackGroup(ctx, g.pool, g.id.Group)
}

// delete removes a group snapshot: its members (which reclaims their
// hidden images) and then its record.
func (g *groupSnap) delete(ctx context.Context, snapshotIDs []string) error {
	rec, err := g.read(ctx)
	if err != nil {
		return err
	}
	if !rec.Exists {
		return nil
	}
	if !rec.Complete() {
		if err := g.rollback(ctx); err != nil {
			return cephStatus(err)
		}
		return nil
	}
	if err := matchesRecord(rec, snapshotIDs, g.id.String()); err != nil {
		return err
	}
	if err := g.finish(ctx, rec); err != nil {
		return err
	}
	for _, m := range rec.Members {
		snap, _ := volid.DecodeSnapshot(m.Snapshot) // finish checked them
		if err := g.c.deleteSnapshot(ctx, g.pool, m.Snapshot, snap); err != nil {
			return err
		}
	}
	if err := g.c.groups.Remove(ctx, g.pool, g.hash); err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return cephStatus(err)
	}
	return nil
}
