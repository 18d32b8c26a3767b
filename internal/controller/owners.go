package controller

// Which VolumeSnapshot a snapshot serves, written on its image so that
// `rbd image-meta list` answers an admin's "whose is this?" in a pool
// several clusters or teams share (a volume's own owner is part of its
// record: records.NewVolume).

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// nameSnapshot records on the image which VolumeSnapshot its snapshot
// was taken for, where the snapshotter names one, so that an admin can
// trace a csi-snap-<hash> in `rbd snap ls`. A retry writes it again.
func (c *Controller) nameSnapshot(ctx context.Context, pool rbd.Pool, fam rbd.Family, snap string, owner config.SnapshotOwner) error {
	if owner == (config.SnapshotOwner{}) {
		return nil
	}
	value, err := records.SnapshotOwnerValue(owner)
	if err != nil {
		return status.Errorf(codes.Internal, "snapshot owner: %v", err)
	}
	if have, _ := c.names.Volume(fam.Name, fam.Metadata).SnapshotOwner(snap); have == value {
		return nil
	}
	if err := c.backend.SetMetadata(ctx, pool, fam.Name, map[string]string{records.SnapshotOwnerKey(snap): value}); err != nil {
		return cephStatus(err)
	}
	return nil
}

// unnameSnapshot drops a removed snapshot's name from its image. It runs
// after the removal, so a crash in between leaves the name to the retry.
// It returns the image's family as read after the removal (nil: the
// image is gone), for the reclaim that follows.
func (c *Controller) unnameSnapshot(ctx context.Context, pool rbd.Pool, snap volid.Snapshot) (*rbd.Family, error) {
	fam, err := c.familyByID(ctx, pool, snap.ImageID)
	if err != nil || fam == nil {
		return nil, err
	}
	if _, ok := c.names.Volume(fam.Name, fam.Metadata).SnapshotOwner(snap.Snap); !ok {
		return fam, nil
	}
	if err := c.backend.RemoveMetadata(ctx, pool, fam.Name, records.SnapshotOwnerKey(snap.Snap)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return nil, cephStatus(err)
	}
	return fam, nil
}
