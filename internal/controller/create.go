package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// CreateVolume creates an image named after the request, or returns the
// one an earlier attempt with the same name made: it checks the request,
// places the volume in a pool, and makes it there under the name's lock.
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	a, err := c.checkCreate(req)
	if err != nil {
		return nil, err
	}
	if err := c.placeVolume(ctx, req, &a); err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock("name/"+a.name, records.ImageLock(a.pool, a.vol.Image))
	if !ok {
		return nil, pending("volume " + a.name)
	}
	defer release()
	c.up.Touch(a.pool, a.vol.Image)
	size, err := c.makeVolume(ctx, req, &a)
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           a.vol.String(),
		CapacityBytes:      size,
		VolumeContext:      a.params.VolumeContext(),
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: a.accessible,
	}}, nil
}

// createArgs is a CreateVolume request, checked (checkCreate) and placed
// (placeVolume).
type createArgs struct {
	name   string
	params config.Params
	size   int64
	image  string
	// Where the volume goes.
	pool       rbd.Pool
	vol        volid.Volume
	accessible []*csi.Topology
}

// checkCreate checks what a CreateVolume asks for, before any Ceph call.
func (c *Controller) checkCreate(req *csi.CreateVolumeRequest) (createArgs, error) {
	name := req.GetName()
	if name == "" {
		return createArgs{}, status.Error(codes.InvalidArgument, "volume name is missing")
	}
	if len(name) > maxNameLen {
		return createArgs{}, status.Errorf(codes.InvalidArgument, "volume name is longer than %d bytes", maxNameLen)
	}
	caps := req.GetVolumeCapabilities()
	if err := checkCapabilities(caps); err != nil {
		return createArgs{}, status.Error(codes.InvalidArgument, err.Error())
	}
	params, err := config.ParseParams(req.GetParameters())
	if err != nil {
		return createArgs{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if !c.opts.AllowInsecureMapOptions {
		if err := config.CheckMapOptionsSecure(params.MapOptions); err != nil {
			return createArgs{}, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := c.checkEncryption(params.Encryption, caps); err != nil {
		return createArgs{}, err
	}
	if params.ImageFeatures, err = params.VolumeFeatures(multiWriter(caps...)); err != nil {
		return createArgs{}, status.Error(codes.InvalidArgument, err.Error())
	}
	// Mutable parameters (a VolumeAttributesClass) win over parameters.
	// A new volume has nothing to sparsify: the request is ignored.
	mutable, _, err := mutableParams(req.GetMutableParameters())
	if err != nil {
		return createArgs{}, err
	}
	if params.QoS, err = params.QoS.Merge(mutable); err != nil {
		return createArgs{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if isBlock(caps...) && params.FsType != "" {
		params.FsType = "" // a raw block volume has no filesystem
	}
	size, invalid, outOfRange := sizeFor(req.GetCapacityRange())
	if invalid != nil {
		return createArgs{}, status.Error(codes.InvalidArgument, invalid.Error())
	}
	if outOfRange != nil {
		return createArgs{}, status.Error(codes.OutOfRange, outOfRange.Error())
	}
	prefix, err := c.namePrefix(params)
	if err != nil {
		return createArgs{}, err
	}
	return createArgs{name: name, params: params, size: size, image: c.names.Image(prefix, name)}, nil
}

// placeVolume picks the volume's pool (by topology, for a class with
// topologyConstrainedPools) and the credentials to reach it with.
func (c *Controller) placeVolume(ctx context.Context, req *csi.CreateVolumeRequest, a *createArgs) error {
	where, err := c.placeByTopology(ctx, a.params, req, a.image)
	if err != nil {
		return err
	}
	if where != nil {
		a.params.Pool, a.accessible = where.pool.PoolName, where.accessible
		if where.pool.DataPool != "" {
			a.params.DataPool = where.pool.DataPool
		}
	}
	if a.pool, err = c.pool(a.params.ClusterID, a.params.Pool, req.GetSecrets()); err != nil {
		return err
	}
	a.vol = volid.Volume{ClusterID: a.params.ClusterID, Pool: a.params.Pool, Image: a.image}
	if err := a.vol.Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume ID: %v", err)
	}
	return nil
}

// makeVolume makes the image, a copy-on-write clone for a content source,
// or adopts what an earlier attempt made; it returns the volume's size.
func (c *Controller) makeVolume(ctx context.Context, req *csi.CreateVolumeRequest, a *createArgs) (int64, error) {
	if cs := req.GetVolumeContentSource(); cs != nil {
		return c.createFromSource(ctx, a.pool, a.image, a.name, a.params, req.GetCapacityRange(), cs, req.GetSecrets())
	}
	spec := rbd.ImageSpec{
		Size:     uint64(a.size),
		Features: a.params.ImageFeatures,
		DataPool: a.params.DataPool,
		Metadata: records.NewVolumeOf(a.name, a.params, uint64(a.size)).Metadata(),
		Marker:   records.VolumeMarker,
	}
	a.params.CreatedEmpty = true // the node may format it as all zeros
	return c.createImage(ctx, a.pool, a.image, a.name, spec, req.GetCapacityRange(), a.params.Encryption, req.GetSecrets())
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
