package controller

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// notPrimary refuses to take a snapshot of, restore or clone from a
// non-primary mirror copy: its data is what rbd-mirror last copied from
// the primary on the peer site, librbd takes no snapshot of it, and a
// clone of it would read data that the next sync changes under it.
func notPrimary(fam rbd.Family, what string) error {
	if fam.Mirror == nil || fam.Mirror.Primary {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s is a non-primary mirror copy (its primary is on the peer site): snapshots, restores and clones are taken of the primary; promote this copy first (PromoteVolume)", what)
}
