package upkeep

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A group snapshot is made through a temporary RBD group (the handlers'
// groupsnap.go has its steps). Once its members are recorded, finishing
// it hides the member images and removes the group; before that, rolling
// it back removes what was made. A crash leaves the RBD group, which the
// group step finds: it finishes a recorded group snapshot and rolls back
// an unrecorded one older than an interval.

// finishGroup runs the last step of a recorded group snapshot: each member
// image becomes a hidden image (csi-del-<ID>), kept for its snapshot like
// a deleted volume's, and the group goes, with its snapshot (which RBD
// keeps in its trash while the members need it) and its images'
// membership.
func (e *env) finishGroup(ctx context.Context, pool rbd.Pool, group string, rec records.GroupRecord) error {
	hash, _ := e.names.GroupHash(group)
	for i, m := range rec.Members {
		snap, err := volid.DecodeSnapshot(m.Snapshot)
		if err != nil {
			return fmt.Errorf("the record of group snapshot %s names a malformed snapshot %q", group, m.Snapshot)
		}
		err = e.backend.Rename(ctx, pool, e.names.GroupMember(hash, i), e.names.Hidden(snap.ImageID))
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
	}
	e.fault("CreateVolumeGroupSnapshot:hidden")
	return e.backend.RemoveGroup(ctx, pool, group)
}

// rollbackGroup undoes an unrecorded group snapshot: the record first (the
// group outlives it, for the sweep to find), then the member images, then
// the group with its snapshot.
func (e *env) rollbackGroup(ctx context.Context, pool rbd.Pool, group string) error {
	hash, _ := e.names.GroupHash(group)
	b := e.backend
	if err := e.groups.Remove(ctx, pool, hash); err != nil {
		return err
	}
	names, err := b.ListImages(ctx, pool)
	if err != nil && !errors.Is(err, rbd.ErrPoolNotFound) {
		return err
	}
	for _, n := range names {
		if !e.names.IsGroupMember(hash, n) {
			continue
		}
		fam, err := b.StatFamily(ctx, pool, n, "")
		if errors.Is(err, rbd.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		for _, s := range fam.Snaps {
			if err := b.RemoveSnapshot(ctx, pool, fam.ID, s.Name); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return err
			}
		}
		if err := e.removeImage(ctx, pool, fam); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
	}
	return b.RemoveGroup(ctx, pool, group)
}

// groupStep finishes or rolls back the group snapshots whose RBD group a
// crash left behind.
func groupStep(s *sweeper) Step {
	return Step{What: "group snapshots' RBD groups", Sweep: s.sweepGroups}
}

func (s *sweeper) sweepGroups(ctx context.Context, pool rbd.Pool) error {
	if s.backend.GroupSnapshots() != nil {
		return nil
	}
	groups, err := s.backend.ListGroups(ctx, pool)
	if errors.Is(err, rbd.ErrPoolNotFound) || errors.Is(err, rbd.ErrPermission) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, group := range groups {
		if !s.names.IsGroup(group) {
			continue
		}
		if err := s.sweepGroup(ctx, pool, group); err != nil {
			klog.ErrorS(err, "sweeping a group snapshot's RBD group", "pool", pool.Name, "group", group)
		}
	}
	return nil
}

func (s *sweeper) sweepGroup(ctx context.Context, pool rbd.Pool, group string) error {
	hash, _ := s.names.GroupHash(group)
	release, ok := s.locks.TryLock(records.GroupLock(pool, hash))
	if !ok {
		return nil // its request is running
	}
	defer release()
	rec, err := s.groups.Read(ctx, pool, hash)
	switch {
	case err != nil:
		return err
	case rec.Complete():
		if err := s.finishGroup(ctx, pool, group, rec); err != nil {
			return err
		}
		klog.InfoS("completed a group snapshot that no retry came back for", "pool", pool.Name, "group", group)
	case !rec.Exists || s.settled(rec.Started):
		if err := s.rollbackGroup(ctx, pool, group); err != nil {
			return fmt.Errorf("rolling back: %w", err)
		}
		klog.InfoS("rolled back a group snapshot that no retry came back for", "pool", pool.Name, "group", group)
		s.o.Observer.Reclaimed(reclaimedGroup)
	}
	return nil
}
