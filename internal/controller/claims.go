package controller

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// claimSnapshot claims an RBD snapshot name for its source image, so that
// the same name for another source is refused, also across restarts. The
// claim is indexed first (records.Claims): a claim a crash abandons is
// found by the sweep, which withdraws it.
func (c *Controller) claimSnapshot(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	if err := c.claims.Add(ctx, pool, snap, imageID, name); err != nil {
		return cephStatus(fmt.Errorf("indexing the claim of snapshot %s: %w", name, err))
	}
	holder, err := c.backend.Claim(ctx, pool, records.ClaimObject(snap), imageID)
	if err != nil {
		return cephStatus(err)
	}
	if holder != imageID {
		c.settleClaim(ctx, pool, snap)
		return status.Errorf(codes.AlreadyExists, "snapshot name %q is already used for another source volume", name)
	}
	return nil
}

// settleClaim drops the index entry once the claim's fate is known (the
// snapshot exists, the name is another source's, the claim is withdrawn).
// A failure only leaves work for the sweep.
func (c *Controller) settleClaim(ctx context.Context, pool rbd.Pool, snap string) {
	if err := c.claims.Settle(ctx, pool, snap); err != nil {
		klog.ErrorS(err, "removing a snapshot claim from the index; the sweep does it later", "pool", pool.Name, "snap", snap)
	}
}
