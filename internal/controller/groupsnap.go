package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
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
// the RBD group, which the sweeper finds: it completes 6 for a recorded
// group snapshot and rolls back an unrecorded one older than an interval.
// Deleting a member snapshot reclaims its hidden image like any other.

// groupSnapName is the one snapshot taken of each temporary RBD group.
const groupSnapName = "snap"

// groupSnap is one group snapshot of one pool.
type groupSnap struct {
	c    *Controller
	pool rbd.Pool
	id   volid.Group
	hash string // of the request name: names the group, record, members
}

func (c *Controller) newGroupSnap(pool rbd.Pool, clusterID, group string) *groupSnap {
	hash, _ := c.names.groupHash(group)
	return &groupSnap{c: c, pool: pool, id: volid.Group{ClusterID: clusterID, Pool: pool.Name, Group: group}, hash: hash}
}

func (g *groupSnap) lockKey() string { return "vgs/" + poolKey(g.pool) + "/" + g.hash }

func (g *groupSnap) record() string { return g.c.groupRecordObject(g.hash) }

// create runs the steps, or answers from the record of an earlier attempt.
func (g *groupSnap) create(ctx context.Context, name string, vols []volid.Volume) (groupRecord, error) {
	ids := make([]string, len(vols))
	for i, v := range vols {
		ids[i] = v.String()
	}
	sources := strings.Join(ids, "\n")
	holder, err := g.c.backend.Claim(ctx, g.pool, g.record(), sources)
	if err != nil {
		return groupRecord{}, cephStatus(err)
	}
	if holder != sources {
		return groupRecord{}, status.Errorf(codes.AlreadyExists, "group snapshot name %q is already used for another set of volumes", name)
	}
	rec, err := g.readOmap(ctx)
	if err != nil {
		return groupRecord{}, err
	}
	if rec.name != "" && rec.name != name {
		return groupRecord{}, status.Errorf(codes.AlreadyExists, "group snapshot name %q is already used for another set of volumes", name)
	}
	if rec.complete() {
		return rec, g.finish(ctx, rec)
	}
	if rec.name == "" {
		rec.name, rec.started = name, time.Now()
		if err := g.c.backend.SetOmap(ctx, g.pool, g.record(), map[string]string{recName: name, recStarted: strconv.FormatInt(rec.started.Unix(), 10)}); err != nil {
			return groupRecord{}, g.failed(cephStatus(err))
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:claimed")
	if rec, err = g.take(ctx, rec, vols); err != nil {
		return groupRecord{}, g.failed(err)
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
func (g *groupSnap) take(ctx context.Context, rec groupRecord, vols []volid.Volume) (groupRecord, error) {
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
	if rec.taken.IsZero() {
		rec.taken = time.Now()
		if err := b.SetOmap(ctx, g.pool, g.record(), map[string]string{recTaken: strconv.FormatInt(rec.taken.UnixNano(), 10)}); err != nil {
			return rec, cephStatus(err)
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:snapshotted")
	members := make([]groupMember, len(vols))
	for i, v := range vols {
		at := slices.IndexFunc(snap.Members, func(m rbd.GroupMember) bool { return m.Image == v.Image })
		if at < 0 {
			return rec, status.Errorf(codes.Aborted, "group snapshot of %s lacks volume %s; retry", group, v)
		}
		if members[i], err = g.member(ctx, i, v, fams[i], snap.Members[at].SnapID); err != nil {
			return rec, err
		}
	}
	value, err := json.Marshal(members)
	if err != nil {
		return rec, status.Errorf(codes.Internal, "group snapshot record: %v", err)
	}
	if err := b.SetOmap(ctx, g.pool, g.record(), map[string]string{recMembers: string(value)}); err != nil {
		return rec, cephStatus(err)
	}
	rec.members = members
	return rec, nil
}

// member makes member i: the clone of the volume's image snapshot in the
// group snapshot, and the member snapshot of it.
func (g *groupSnap) member(ctx context.Context, i int, v volid.Volume, fam rbd.Family, snapID uint64) (groupMember, error) {
	b := g.c.backend
	image, snap := g.c.names.groupMember(g.hash, i), g.c.names.groupMemberSnap(g.hash, i)
	info, err := b.Stat(ctx, g.pool, image)
	if err == nil && info.Metadata[metaGroupSnap] != g.id.String() {
		// Unfinished by a crash: no marker yet.
		if err := b.RemoveImage(ctx, g.pool, image); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return groupMember{}, cephStatus(err)
		}
		err = rbd.ErrNotFound
	}
	if errors.Is(err, rbd.ErrNotFound) {
		depth, _ := strconv.Atoi(fam.Metadata[metaDepth])
		spec := rbd.CloneSpec{
			ParentImage: v.Image, ParentSnapID: snapID,
			// It keeps the volume's name (whose snapshot it is) and key
			// record (to restore an encrypted volume), not its
			// attachments, snapshot names or QoS limits.
			DropMetadataPrefixes: []string{attach.MetaPrefix, metaSnapPrefix, qosLimitPrefix},
			ImageSpec: rbd.ImageSpec{
				Features: config.SingleWriterFeatures,
				Metadata: map[string]string{metaDepth: strconv.Itoa(depth + 1), metaGroupSnap: g.id.String()},
				Marker:   metaGroupSnap,
			},
		}
		if err := b.Clone(ctx, g.pool, g.pool, image, spec); err != nil {
			return groupMember{}, g.c.writeStatus(g.pool, err)
		}
		g.c.opts.Fault("CreateVolumeGroupSnapshot:cloned")
	} else if err != nil {
		return groupMember{}, cephStatus(err)
	}
	if err := b.CreateSnapshot(ctx, g.pool, image, snap); err != nil && !errors.Is(err, rbd.ErrExists) {
		return groupMember{}, g.c.writeStatus(g.pool, err)
	}
	mfam, err := b.StatFamily(ctx, g.pool, image, "")
	if err != nil {
		return groupMember{}, cephStatus(err)
	}
	id := volid.Snapshot{ClusterID: g.id.ClusterID, Pool: g.pool.Name, ImageID: mfam.ID, Snap: snap}
	if err := id.Validate(); err != nil {
		return groupMember{}, status.Errorf(codes.Internal, "member snapshot ID: %v", err)
	}
	return groupMember{Snapshot: id.String(), Source: v.String(), Size: int64(mfam.Size)}, nil
}

// finish runs step 6 for a recorded group snapshot.
func (g *groupSnap) finish(ctx context.Context, rec groupRecord) error {
	for i, m := range rec.members {
		snap, err := volid.DecodeSnapshot(m.Snapshot)
		if err != nil {
			return status.Errorf(codes.Internal, "the record of group snapshot %s names a malformed snapshot %q", g.id, m.Snapshot)
		}
		err = g.c.backend.Rename(ctx, g.pool, g.c.names.groupMember(g.hash, i), g.c.names.hidden(snap.ImageID))
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return cephStatus(err)
		}
	}
	g.c.opts.Fault("CreateVolumeGroupSnapshot:hidden")
	if err := g.c.backend.RemoveGroup(ctx, g.pool, g.id.Group); err != nil {
		return cephStatus(err)
	}
	return nil
}

// rollback undoes an unrecorded group snapshot: the record first (the
// group outlives it, for the sweeper to find), then the member images,
// then the group with its snapshot.
func (g *groupSnap) rollback(ctx context.Context) error {
	b := g.c.backend
	if err := b.Unclaim(ctx, g.pool, g.record()); err != nil {
		return err
	}
	names, err := b.ListImages(ctx, g.pool)
	if err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return err
	}
	for _, n := range names {
		if !g.c.names.isGroupMember(g.hash, n) {
			continue
		}
		fam, err := b.StatFamily(ctx, g.pool, n, "")
		if errors.Is(err, rbd.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		for _, s := range fam.Snaps {
			if err := b.RemoveSnapshot(ctx, g.pool, fam.ID, s.Name); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return err
			}
		}
		if err := g.c.removeImage(ctx, g.pool, fam); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
	}
	return b.RemoveGroup(ctx, g.pool, g.id.Group)
}

// delete removes a group snapshot: its members (which reclaims their
// hidden images) and then its record.
func (g *groupSnap) delete(ctx context.Context, snapshotIDs []string) error {
	rec, err := g.read(ctx)
	if err != nil {
		return err
	}
	if !rec.exists {
		return nil
	}
	if !rec.complete() {
		if err := g.rollback(ctx); err != nil {
			return cephStatus(err)
		}
		return nil
	}
	if err := rec.matches(snapshotIDs, g.id.String()); err != nil {
		return err
	}
	if err := g.finish(ctx, rec); err != nil {
		return err
	}
	for _, m := range rec.members {
		snap, _ := volid.DecodeSnapshot(m.Snapshot) // finish checked them
		if err := g.c.deleteSnapshot(ctx, g.pool, m.Snapshot, snap); err != nil {
			return err
		}
	}
	if err := g.c.backend.Unclaim(ctx, g.pool, g.record()); err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return cephStatus(err)
	}
	return nil
}

// sweepGroups completes or rolls back the group snapshots whose RBD group
// a crash left behind.
func (s *sweeper) sweepGroups(ctx context.Context, pool rbd.Pool) error {
	if s.c.backend.GroupSnapshots() != nil {
		return nil
	}
	groups, err := s.c.backend.ListGroups(ctx, pool)
	if errors.Is(err, rbd.ErrPoolNotFound) || errors.Is(err, rbd.ErrPermission) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, group := range groups {
		if !s.c.names.isGroup(group) {
			continue
		}
		if err := s.sweepGroup(ctx, pool, group); err != nil {
			klog.ErrorS(err, "sweeping a group snapshot's RBD group", "pool", pool.Name, "group", group)
		}
	}
	return nil
}

func (s *sweeper) sweepGroup(ctx context.Context, pool rbd.Pool, group string) error {
	g := s.c.newGroupSnap(pool, "", group)
	release, ok := s.c.locks.TryLock(g.lockKey())
	if !ok {
		return nil // its request is running
	}
	defer release()
	rec, err := g.read(ctx)
	switch {
	case err != nil:
		return err
	case rec.complete():
		if err := g.finish(ctx, rec); err != nil {
			return err
		}
		klog.InfoS("completed a group snapshot that no retry came back for", "pool", pool.Name, "group", group)
	case !rec.exists || s.settled(rec.started):
		if err := g.rollback(ctx); err != nil {
			return fmt.Errorf("rolling back: %w", err)
		}
		klog.InfoS("rolled back a group snapshot that no retry came back for", "pool", pool.Name, "group", group)
		s.c.opts.Upkeep.Reclaimed(reclaimedGroup)
	}
	return nil
}
