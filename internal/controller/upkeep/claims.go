package upkeep

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// claimStep withdraws the claims of CreateSnapshot calls that did not
// settle within an interval and whose snapshot does not exist (the claim
// index, records.Claims, lists them).
func claimStep(s *sweeper) Step {
	return Step{What: "snapshot claims", Sweep: s.sweepClaims}
}

func (s *sweeper) sweepClaims(ctx context.Context, pool rbd.Pool) error {
	claims, err := s.claims.List(ctx, pool)
	if err != nil {
		return err
	}
	for _, cl := range claims {
		if cl.At.IsZero() || cl.ImageID == "" {
			s.settleClaim(ctx, pool, cl.Snap) // not ours to read
			continue
		}
		if !s.settled(cl.At) {
			continue
		}
		if err := s.sweepClaim(ctx, pool, cl); err != nil {
			klog.ErrorS(err, "sweeping a snapshot claim", "pool", pool.Name, "snap", cl.Snap)
		}
	}
	return nil
}

func (s *sweeper) sweepClaim(ctx context.Context, pool rbd.Pool, cl records.Claim) error {
	release, ok := s.locks.TryLock(records.SnapshotNameLock(cl.Name))
	if !ok {
		return nil // its CreateSnapshot is running
	}
	defer release()
	holder, ok, err := s.backend.ClaimHolder(ctx, pool, records.ClaimObject(cl.Snap))
	if err != nil {
		return err
	}
	if ok && holder == cl.ImageID {
		fam, err := s.backend.StatFamily(ctx, pool, "", cl.ImageID)
		switch {
		case errors.Is(err, rbd.ErrNotFound):
		case err != nil:
			return err
		}
		if !hasSnap(fam.Snaps, cl.Snap) {
			if err := s.backend.Unclaim(ctx, pool, records.ClaimObject(cl.Snap)); err != nil {
				return err
			}
			klog.InfoS("withdrew the claim of a snapshot that no retry came back for", "pool", pool.Name, "name", cl.Name, "snap", cl.Snap)
			s.o.Observer.Reclaimed(reclaimedClaim)
		}
	}
	s.settleClaim(ctx, pool, cl.Snap)
	return nil
}

// settleClaim drops a claim's index entry; a failure leaves it for the
// next sweep.
func (s *sweeper) settleClaim(ctx context.Context, pool rbd.Pool, snap string) {
	if err := s.claims.Settle(ctx, pool, snap); err != nil {
		klog.ErrorS(err, "removing a snapshot claim from the index; the sweep does it later", "pool", pool.Name, "snap", snap)
	}
}

func hasSnap(snaps []rbd.SnapInfo, name string) bool {
	for _, s := range snaps {
		if s.Name == name {
			return true
		}
	}
	return false
}
