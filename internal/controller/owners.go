package controller

// Which Kubernetes objects a volume or a snapshot serves, written on its
// image so that `rbd image-meta list` answers an admin's "whose is this?"
// in a pool several clusters or teams share.

import (
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// volumeMetadata is what CreateVolume writes on a new image: the request
// name (the marker of a finished image, written last), its QoS, the
// owner's names where the provisioner gave them, and extra keys of the
// caller.
func volumeMetadata(name string, p config.Params, size uint64, extra map[string]string) map[string]string {
	meta := map[string]string{metaName: name}
	if p.VolumeNamePrefix != "" && p.VolumeNamePrefix != volumePrefix {
		meta[metaNamePrefix] = p.VolumeNamePrefix
	}
	for k, v := range qosMetadata(p.QoS, size) {
		meta[k] = v
	}
	owner := p.Owner
	for k, v := range map[string]string{metaPVCName: owner.PVCName, metaPVCNamespace: owner.PVCNamespace, metaPVName: owner.PVName} {
		if v != "" {
			meta[k] = v
		}
	}
	for k, v := range extra {
		meta[k] = v
	}
	return meta
}

// nameSnapshot records on the image which VolumeSnapshot its snapshot
// was taken for, where the snapshotter names one, so that an admin can
// trace a csi-snap-<hash> in `rbd snap ls`. A retry writes it again.
func (c *Controller) nameSnapshot(ctx context.Context, pool rbd.Pool, fam rbd.Family, snap string, owner config.SnapshotOwner) error {
	if owner == (config.SnapshotOwner{}) {
		return nil
	}
	value, err := json.Marshal(owner)
	if err != nil {
		return status.Errorf(codes.Internal, "snapshot owner: %v", err)
	}
	if fam.Metadata[metaSnapPrefix+snap] == string(value) {
		return nil
	}
	if err := c.backend.SetMetadata(ctx, pool, fam.Name, map[string]string{metaSnapPrefix + snap: string(value)}); err != nil {
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
	if _, ok := fam.Metadata[metaSnapPrefix+snap.Snap]; !ok {
		return fam, nil
	}
	if err := c.backend.RemoveMetadata(ctx, pool, fam.Name, metaSnapPrefix+snap.Snap); err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return nil, cephStatus(err)
	}
	return fam, nil
}
