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
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

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
		key, err := c.newVolumeKey(ctx, pool, image, name, enc, secrets)
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
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	release, ok := c.locks.TryLock("vol/" + id)
	if !ok {
		return nil, pending("volume " + id)
	}
	c.up.Touch(pool, vol.Image)
	if err := c.removeVolume(ctx, pool, vol, release); err != nil {
		return nil, err
	}
	c.up.After(pool)
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
	vol, pool, release, err := c.lockVolume(id, req.GetSecrets())
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
