package controller

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// indexClaim records a claim about to be made (details: the source image
// ID and the request name).
func (c *Controller) indexClaim(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	if err := c.claims.Add(ctx, pool, snap, imageID, name); err != nil {
		return cephStatus(fmt.Errorf("indexing the claim of snapshot %s: %w", name, err))
	}
	return nil
}

// settleClaim drops the index entry once the claim's fate is known (the
// snapshot exists, the name is another source's, the claim is withdrawn).
// A failure only leaves work for the sweeper.
func (c *Controller) settleClaim(ctx context.Context, pool rbd.Pool, snap string) {
	if err := c.claims.Settle(ctx, pool, snap); err != nil {
		klog.ErrorS(err, "removing a snapshot claim from the index; the sweep does it later", "pool", pool.Name, "snap", snap)
	}
}

// sweepClaims withdraws the claims of CreateSnapshot calls that did not
// settle within an interval and whose snapshot does not exist.
func (s *sweeper) sweepClaims(ctx context.Context, pool rbd.Pool) error {
	claims, err := s.c.claims.List(ctx, pool)
	if err != nil {
		return err
	}
	for _, cl := range claims {
		if cl.At.IsZero() || cl.ImageID == "" {
			s.c.settleClaim(ctx, pool, cl.Snap) // not ours to read
			continue
		}
		if !s.settled(cl.At) {
			continue
		}
		if err := s.sweepClaim(ctx, pool, cl.Snap, cl.ImageID, cl.Name); err != nil {
			klog.ErrorS(err, "sweeping a snapshot claim", "pool", pool.Name, "snap", cl.Snap)
		}
	}
	return nil
}

func (s *sweeper) sweepClaim(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	release, ok := s.c.locks.TryLock(records.SnapshotNameLock(name))
	if !ok {
		return nil // its CreateSnapshot is running
	}
	defer release()
	holder, ok, err := s.c.backend.ClaimHolder(ctx, pool, records.ClaimObject(snap))
	if err != nil {
		return err
	}
	if ok && holder == imageID {
		fam, err := s.c.backend.StatFamily(ctx, pool, "", imageID)
		switch {
		case errors.Is(err, rbd.ErrNotFound):
		case err != nil:
			return err
		}
		if _, exists := findSnap(fam.Snaps, snap); !exists {
			if err := s.c.backend.Unclaim(ctx, pool, records.ClaimObject(snap)); err != nil {
				return err
			}
			klog.InfoS("withdrew the claim of a snapshot that no retry came back for", "pool", pool.Name, "name", name, "snap", snap)
			s.c.opts.Upkeep.Reclaimed(reclaimedClaim)
		}
	}
	s.c.settleClaim(ctx, pool, snap)
	return nil
}
