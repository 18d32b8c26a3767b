package controller

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// What every call does first: find the pool a volume ID or StorageClass
// names, with the request's credentials or the controller's own, take the
// volume's lock, and read its image.

// lockVolume decodes a volume ID (NotFound if it is not one), resolves its
// pool and takes the volume's try-lock. The ID may name a static volume's
// image (see static.go).
func (c *Controller) lockVolume(id string, secrets map[string]string) (volid.Volume, rbd.Pool, func(), error) {
	vol, pool, err := c.volumeAt(id, secrets)
	if err != nil {
		return volid.Volume{}, rbd.Pool{}, nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return volid.Volume{}, rbd.Pool{}, nil, pending("volume " + id)
	}
	return vol, pool, release, nil
}

// volumeAt decodes a volume ID (NotFound if it is not one) and resolves
// its pool with the request's secrets, or the controller's own.
func (c *Controller) volumeAt(id string, secrets map[string]string) (volid.Volume, rbd.Pool, error) {
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return volid.Volume{}, rbd.Pool{}, status.Errorf(codes.NotFound, "volume %.130q does not exist", id)
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, secrets)
	return vol, pool, err
}

// stat returns a volume's image, or NotFound: one named like ours must be
// finished, a static volume's need only exist.
func (c *Controller) stat(ctx context.Context, pool rbd.Pool, vol volid.Volume) (rbd.ImageInfo, error) {
	info, err := c.backend.Stat(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && c.names.Volume(vol.Image, info.Metadata).State == records.Unfinished) {
		return rbd.ImageInfo{}, status.Errorf(codes.NotFound, "volume %s does not exist", vol)
	}
	if err != nil {
		return rbd.ImageInfo{}, cephStatus(err)
	}
	return info, nil
}

// noPool answers a create whose pool, or RADOS namespace, is missing.
func noPool(pool rbd.Pool, err error) error {
	if errors.Is(err, rbd.ErrNamespaceNotFound) {
		return status.Errorf(codes.InvalidArgument, "%v (check the cluster map's rbd.radosNamespace)", err)
	}
	return status.Errorf(codes.InvalidArgument, "pool %q does not exist in the cluster (check the StorageClass parameter %q)", pool.Name, config.ParamPool)
}

// pool resolves where a volume lives and with which credentials: the
// request's secrets, else the controller's own (--controller-secret-dir).
// A StorageClass may name no Secret at all, or only a tenant's KEK Secret.
func (c *Controller) pool(clusterID, pool string, secrets map[string]string) (rbd.Pool, error) {
	entry, err := c.clusters.Lookup(clusterID)
	if err != nil {
		return rbd.Pool{}, status.Errorf(codes.InvalidArgument, "%v (check the StorageClass parameter %q and the driver's cluster map)", err, config.ParamClusterID)
	}
	cred, err := cluster.CallCredentials(secrets, c.cred, "--controller-secret-dir")
	if err != nil {
		return rbd.Pool{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return rbd.NewPool(entry, cred, pool), nil
}

// sameCluster reports whether two clusterIDs name one cluster: the same
// ID, or one the map resolves to the other's entry (on a site of RBD
// mirroring, the peer's ID that a mirrored volume's ID carries).
func (c *Controller) sameCluster(a, b string) bool {
	if a == b {
		return true
	}
	ea, errA := c.clusters.Lookup(a)
	eb, errB := c.clusters.Lookup(b)
	return errA == nil && errB == nil && ea.ClusterID == eb.ClusterID
}

func findSnap(snaps []rbd.SnapInfo, name string) (rbd.SnapInfo, bool) {
	for _, s := range snaps {
		if s.Name == name {
			return s, true
		}
	}
	return rbd.SnapInfo{}, false
}

// family returns a live volume image with its relations, or NotFound: one
// named like ours must be finished, a static volume's need only exist.
func (c *Controller) family(ctx context.Context, pool rbd.Pool, vol volid.Volume) (rbd.Family, error) {
	fam, err := c.backend.StatFamily(ctx, pool, vol.Image, "")
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && c.names.Volume(vol.Image, fam.Metadata).State == records.Unfinished) {
		return rbd.Family{}, status.Errorf(codes.NotFound, "volume %s does not exist", vol)
	}
	if err != nil {
		return rbd.Family{}, cephStatus(err)
	}
	return fam, nil
}

// familyByID reads an image's family; nil if the image or pool is gone.
func (c *Controller) familyByID(ctx context.Context, pool rbd.Pool, imageID string) (*rbd.Family, error) {
	fam, err := c.backend.StatFamily(ctx, pool, "", imageID)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, cephStatus(err)
	}
	return &fam, nil
}

// waitLock takes a key of the controller's try-locks, queueing until it
// is free or ctx ends.
func (c *Controller) waitLock(ctx context.Context, key string) (func(), error) {
	release, err := c.locks.Wait(ctx, key)
	if err != nil {
		return nil, cephStatus(err)
	}
	return release, nil
}
