package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// CreateVolume creates an image named after the request, or returns the
// one an earlier attempt with the same name made.
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is missing")
	}
	if len(name) > maxNameLen {
		return nil, status.Errorf(codes.InvalidArgument, "volume name is longer than %d bytes", maxNameLen)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	params, err := config.ParseParams(req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := c.checkEncryption(params.Encryption, req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if params.ImageFeatures, err = params.VolumeFeatures(multiWriter(req.GetVolumeCapabilities()...)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Mutable parameters (a VolumeAttributesClass) win over parameters.
	// A new volume has nothing to sparsify: the request is ignored.
	mutable, _, err := mutableParams(req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	if params.QoS, err = params.QoS.Merge(mutable); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if isBlock(req.GetVolumeCapabilities()...) && params.FsType != "" {
		params.FsType = "" // a raw block volume has no filesystem
	}
	size, invalid, outOfRange := sizeFor(req.GetCapacityRange())
	if invalid != nil {
		return nil, status.Error(codes.InvalidArgument, invalid.Error())
	}
	if outOfRange != nil {
		return nil, status.Error(codes.OutOfRange, outOfRange.Error())
	}
	prefix, err := c.namePrefix(params)
	if err != nil {
		return nil, err
	}
	image := c.names.Image(prefix, name)
	where, err := c.place(ctx, params, req, image)
	if err != nil {
		return nil, err
	}
	var accessible []*csi.Topology
	if where != nil {
		params.Pool, accessible = where.pool.PoolName, where.accessible
		if where.pool.DataPool != "" {
			params.DataPool = where.pool.DataPool
		}
	}
	pool, err := c.pool(params.ClusterID, params.Pool, req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	vol := volid.Volume{ClusterID: params.ClusterID, Pool: params.Pool, Image: image}
	release, ok := c.locks.TryLock("name/"+name, records.ImageLock(pool, vol.Image))
	if !ok {
		return nil, pending("volume " + name)
	}
	defer release()
	c.sweeper.touch(pool, vol.Image)

	if err := vol.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume ID: %v", err)
	}
	spec := rbd.ImageSpec{
		Size:     uint64(size),
		Features: params.ImageFeatures,
		DataPool: params.DataPool,
		Metadata: newVolume(name, params, uint64(size)).Metadata(),
		Marker:   records.VolumeMarker,
	}
	var finalSize int64
	if cs := req.GetVolumeContentSource(); cs != nil {
		finalSize, err = c.createFromSource(ctx, pool, vol.Image, name, params, req.GetCapacityRange(), cs, req.GetSecrets())
	} else {
		finalSize, err = c.createImage(ctx, pool, vol.Image, name, spec, req.GetCapacityRange(), params.Encryption, req.GetSecrets())
		params.CreatedEmpty = true // the node may format it as all zeros
	}
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           vol.String(),
		CapacityBytes:      finalSize,
		VolumeContext:      params.VolumeContext(),
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: accessible,
	}}, nil
}

// createImage creates the image or adopts the one an earlier attempt made.
// An encrypted volume's key record joins spec.Metadata (crypt.go).
func (c *Controller) createImage(ctx context.Context, pool rbd.Pool, image, name string, spec rbd.ImageSpec, r *csi.CapacityRange, enc config.Encryption, secrets map[string]string) (int64, error) {
	if enc.Enabled {
		// A retry that finds the finished volume returns it: a data key is
		// drawn, and the KEK needed, only for an image about to be made.
		info, err := c.backend.Stat(ctx, pool, image)
		switch {
		case err == nil && c.names.Volume(image, info.Metadata).Finished():
			return c.adoptImage(pool, image, name, info, r, enc)
		case err != nil && !errors.Is(err, rbd.ErrNotFound) && !errors.Is(err, rbd.ErrPoolNotFound):
			return 0, cephStatus(err)
		}
		key, err := c.newVolumeKey(ctx, name, enc, secrets)
		if err != nil {
			return 0, err
		}
		spec.Metadata = maps.Clone(spec.Metadata)
		maps.Copy(spec.Metadata, key)
	}
	// Two passes at most: the second follows the removal of an unfinished image.
	for attempt := 0; attempt < 2; attempt++ {
		err := c.backend.CreateImage(ctx, pool, image, spec)
		if err == nil {
			klog.V(2).InfoS("created volume", "name", name, "pool", pool.Name, "image", image, "size", spec.Size)
			return int64(spec.Size), nil
		}
		if errors.Is(err, rbd.ErrPoolNotFound) {
			return 0, noPool(pool, err)
		}
		if !errors.Is(err, rbd.ErrExists) {
			return 0, c.writeStatus(pool, fmt.Errorf("creating volume %s: %w", name, err))
		}
		info, err := c.backend.Stat(ctx, pool, image)
		if errors.Is(err, rbd.ErrNotFound) {
			continue // removed meanwhile; create again
		}
		if err != nil {
			return 0, cephStatus(err)
		}
		if c.names.Volume(image, info.Metadata).Finished() {
			return c.adoptImage(pool, image, name, info, r, enc)
		}
		// An image without its name is what a crash between creating it and
		// setting its metadata leaves. It was never handed out: replace it.
		if err := c.removeUnfinished(ctx, pool, image, name); err != nil {
			return 0, err
		}
	}
	return 0, status.Errorf(codes.Aborted, "volume %s changed while it was being created; retry", name)
}

// adoptImage answers a retry that finds the finished volume: the same
// name, no content source, the size in range, the same encryption.
func (c *Controller) adoptImage(pool rbd.Pool, image, name string, info rbd.ImageInfo, r *csi.CapacityRange, enc config.Encryption) (int64, error) {
	v := c.names.Volume(image, info.Metadata)
	if v.Name != name {
		return 0, status.Errorf(codes.AlreadyExists, "image %s/%s already belongs to volume %q", pool.Name, image, v.Name)
	}
	if v.Source != "" {
		return 0, status.Errorf(codes.AlreadyExists, "volume %s already exists with a content source", name)
	}
	if !fits(int64(info.Size), r) {
		return 0, status.Errorf(codes.AlreadyExists, "volume %s already exists with size %d bytes, which does not fit the requested range", name, info.Size)
	}
	if err := sameEncryption(v, enc, name); err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

// DeleteVolume removes the volume's image. An ID that is not ours, or an
// image that is gone already, is a success.
func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	vol, err := volid.DecodeVolume(id)
	if err != nil || !c.names.IsVolumeImage(vol.Image) {
		klog.V(2).InfoS("deleting a volume ID that is not ours: nothing to do", "volumeID", id)
		return &csi.DeleteVolumeResponse{}, nil
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return nil, pending("volume " + id)
	}
	c.sweeper.touch(pool, vol.Image)
	if err := c.removeVolume(ctx, pool, vol, release); err != nil {
		return nil, err
	}
	c.sweeper.after(pool)
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerExpandVolume grows the image; shrinking is never done.
func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range is missing")
	}
	if cap := req.GetVolumeCapability(); cap != nil {
		if err := checkCapability(cap); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	size, invalid, outOfRange := sizeFor(req.GetCapacityRange())
	if invalid != nil {
		return nil, status.Error(codes.InvalidArgument, invalid.Error())
	}
	if outOfRange != nil {
		return nil, status.Error(codes.OutOfRange, outOfRange.Error())
	}
	vol, pool, release, err := c.lockVolume(id, req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	defer release()

	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	// An encrypted Block volume needs the node too: the dm-crypt device
	// on top shows the new size only after cryptsetup resize.
	nodeExpand := !isBlock(req.GetVolumeCapability()) || c.names.Volume(vol.Image, info.Metadata).Encrypted()
	if int64(info.Size) >= size {
		if err := c.resizeQoS(ctx, pool, vol.Image, info, info.Size); err != nil {
			return nil, c.writeStatus(pool, fmt.Errorf("recomputing the QoS of volume %s: %w", id, err))
		}
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(info.Size), NodeExpansionRequired: nodeExpand}, nil
	}
	if err := c.backend.Resize(ctx, pool, vol.Image, uint64(size)); err != nil {
		return nil, c.writeStatus(pool, fmt.Errorf("expanding volume %s: %w", id, err))
	}
	// A crash before this leaves the old limits; the retry of the expand
	// finds the size reached and recomputes them (below, on that path too).
	if err := c.resizeQoS(ctx, pool, vol.Image, info, uint64(size)); err != nil {
		return nil, c.writeStatus(pool, fmt.Errorf("recomputing the QoS of volume %s: %w", id, err))
	}
	klog.V(2).InfoS("expanded volume", "volumeID", id, "from", info.Size, "to", size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpand}, nil
}

// lockVolume decodes a volume ID (NotFound if it is not one), resolves its
// pool and takes the volume's try-lock. The ID may name a static volume's
// image (see static.go).
func (c *Controller) lockVolume(id string, secrets map[string]string, ownCredsOK bool) (volid.Volume, rbd.Pool, func(), error) {
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return volid.Volume{}, rbd.Pool{}, nil, status.Errorf(codes.NotFound, "volume %.130q does not exist", id)
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, secrets, ownCredsOK)
	if err != nil {
		return volid.Volume{}, rbd.Pool{}, nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return volid.Volume{}, rbd.Pool{}, nil, pending("volume " + id)
	}
	return vol, pool, release, nil
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
// request's secrets, else the controller's own (for calls without secrets).
// Calls that change a volume must bring their own secrets (ownCredsOK false).
func (c *Controller) pool(clusterID, pool string, secrets map[string]string, ownCredsOK bool) (rbd.Pool, error) {
	cluster, err := c.clusters.Lookup(clusterID)
	if err != nil {
		return rbd.Pool{}, status.Errorf(codes.InvalidArgument, "%v (check the StorageClass parameter %q and the driver's cluster map)", err, config.ParamClusterID)
	}
	var cred config.Credentials
	switch {
	case len(secrets) > 0:
		if cred, err = config.CredentialsFromSecrets(secrets); err != nil {
			return rbd.Pool{}, status.Error(codes.InvalidArgument, err.Error())
		}
	case ownCredsOK && c.cred != nil:
		cred = *c.cred
	case ownCredsOK:
		return rbd.Pool{}, status.Errorf(codes.InvalidArgument, "the request carries no secrets %q/%q and the controller has no credentials of its own (--controller-secret-dir)", config.SecretUserID, config.SecretUserKey)
	default:
		_, err := config.CredentialsFromSecrets(secrets)
		return rbd.Pool{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return rbd.NewPool(cluster, cred, pool), nil
}

// newVolume is the record of a new volume of these parameters.
func newVolume(name string, p config.Params, size uint64) records.NewVolume {
	return records.NewVolume{Name: name, NamePrefix: p.VolumeNamePrefix, QoS: p.QoS, Size: size, Owner: p.Owner}
}

// namePrefix is the prefix a new volume of these parameters is named
// with: the StorageClass's volumeNamePrefix, which must be one the
// controller was started with, or records.VolumePrefix.
func (c *Controller) namePrefix(p config.Params) (string, error) {
	if p.VolumeNamePrefix == "" {
		return records.VolumePrefix, nil
	}
	if !c.names.AllowsPrefix(p.VolumeNamePrefix) {
		return "", status.Errorf(codes.InvalidArgument, "parameter %s: %q is not a prefix this driver's controller was started with; add it to its --volume-name-prefixes (it then treats every image so named as its own)", config.ParamVolumeNamePrefix, p.VolumeNamePrefix)
	}
	return p.VolumeNamePrefix, nil
}
