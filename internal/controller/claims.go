package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// claimIndex is an omap object listing the snapshot claims whose
// CreateSnapshot has not settled yet: key the RBD snapshot name, value
// "<unix time> <source image ID> <request name>". Claims are objects of
// their own, which only a scan of every object in the pool could find; the
// index lets the sweeper find the claim of a CreateSnapshot that crashed
// and was never retried.
const claimIndex = "rbdcsi.snapclaims" // one per instance: naming.object

// indexClaim records a claim about to be made (details: the source image
// ID and the request name).
func (c *Controller) indexClaim(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	if err := c.claims.add(ctx, pool, snap, imageID+" "+name); err != nil {
		return cephStatus(fmt.Errorf("indexing the claim of snapshot %s: %w", name, err))
	}
	return nil
}

// settleClaim drops the index entry once the claim's fate is known (the
// snapshot exists, the name is another source's, the claim is withdrawn).
// A failure only leaves work for the sweeper.
func (c *Controller) settleClaim(ctx context.Context, pool rbd.Pool, snap string) {
	if err := c.claims.drop(ctx, pool, snap); err != nil {
		klog.ErrorS(err, "removing a snapshot claim from the index; the sweep does it later", "pool", pool.Name, "snap", snap)
	}
}

// sweepClaims withdraws the claims of CreateSnapshot calls that did not
// settle within an interval and whose snapshot does not exist.
func (s *sweeper) sweepClaims(ctx context.Context, pool rbd.Pool) error {
	entries, err := s.c.claims.list(ctx, pool)
	if err != nil {
		return err
	}
	for _, e := range entries {
		imageID, name, _ := strings.Cut(e.details, " ")
		if e.at.IsZero() || imageID == "" {
			s.c.settleClaim(ctx, pool, e.key) // not ours to read
			continue
		}
		if !s.settled(e.at) {
			continue
		}
		if err := s.sweepClaim(ctx, pool, e.key, imageID, name); err != nil {
			klog.ErrorS(err, "sweeping a snapshot claim", "pool", pool.Name, "snap", e.key)
		}
	}
	return nil
}

func (s *sweeper) sweepClaim(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	release, ok := s.c.locks.TryLock("snap/" + name)
	if !ok {
		return nil // its CreateSnapshot is running
	}
	defer release()
	holder, ok, err := s.c.backend.ClaimHolder(ctx, pool, claimPrefix+snap)
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
			if err := s.c.backend.Unclaim(ctx, pool, claimPrefix+snap); err != nil {
				return err
			}
			klog.InfoS("withdrew the claim of a snapshot that no retry came back for", "pool", pool.Name, "name", name, "snap", snap)
			s.c.opts.Upkeep.Reclaimed(reclaimedClaim)
		}
	}
	s.c.settleClaim(ctx, pool, snap)
	return nil
}
