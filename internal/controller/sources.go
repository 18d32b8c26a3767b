package controller

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// source is what a new volume is cloned from: a snapshot of a parent image.
type source struct {
	id    string // the CSI snapshot or volume ID
	pool  rbd.Pool
	image string // the parent image's current name
	snap  string
	size  uint64
	depth int
	// key is the new volume's key record, for an encrypted parent (crypt.go).
	key map[string]string
}

// createFromSource makes a copy-on-write clone of a snapshot or a volume:
// its cost does not grow with the data. A clone deeper than the soft limit
// is flattened in the background; deeper than the hard limit, the call
// reports Aborted until the flatten is done.
func (c *Controller) createFromSource(ctx context.Context, pool rbd.Pool, image, name string, params config.Params, r *csi.CapacityRange, cs *csi.VolumeContentSource, secrets map[string]string) (int64, error) {
	srcID := sourceID(cs)
	if srcID == "" {
		return 0, status.Error(codes.InvalidArgument, "volume content source names neither a snapshot nor a volume")
	}
	// A finished volume from an earlier attempt answers the retry.
	fam, err := c.backend.StatFamily(ctx, pool, image, "")
	switch {
	case err == nil && c.names.Volume(image, fam.Metadata).Finished():
		return c.adoptClone(ctx, pool, image, name, srcID, fam, r, params.Encryption)
	case err == nil:
		if err := c.removeUnfinished(ctx, pool, image, name); err != nil {
			return 0, err
		}
	case errors.Is(err, rbd.ErrPoolNotFound):
		return 0, noPool(pool, err)
	case !errors.Is(err, rbd.ErrNotFound):
		return 0, cephStatus(err)
	}

	src, err := c.resolveSource(ctx, pool, image, params, name, cs, secrets)
	if err != nil {
		return 0, err
	}
	size, err := cloneSize(r, src.size)
	if err != nil {
		return 0, err
	}
	depth := src.depth + 1
	// The clone inherits the parent's metadata, its key record included;
	// that goes with the rest of rbdcsi.*, and src.key, the child's own
	// record, takes its place (set before the marker, as any other key).
	meta := records.NewVolumeOf(name, params, size)
	meta.Source, meta.Depth, meta.Key = srcID, depth, src.key
	spec := rbd.CloneSpec{ParentImage: src.image, ParentSnap: src.snap, DropMetadataPrefixes: records.CloneDrops(), ImageSpec: rbd.ImageSpec{
		Size: size, Features: params.ImageFeatures, DataPool: params.DataPool,
		Metadata: meta.Metadata(),
		Marker:   records.VolumeMarker,
	}}
	if err := c.backend.Clone(ctx, src.pool, pool, image, spec); err != nil {
		if errors.Is(err, rbd.ErrExists) {
			return 0, status.Errorf(codes.Aborted, "volume %s is being created by another attempt; retry", name)
		}
		return 0, c.writeStatus(pool, err)
	}
	klog.V(2).InfoS("cloned volume", "name", name, "source", srcID, "depth", depth, "size", size)
	fam, err = c.backend.StatFamily(ctx, pool, image, "")
	if err != nil {
		return 0, cephStatus(err)
	}
	return c.adoptClone(ctx, pool, image, name, srcID, fam, r, params.Encryption)
}

// adoptClone answers for a finished clone: same name, source and
// encryption, size in range, and not too deep (else flattening starts).
func (c *Controller) adoptClone(ctx context.Context, pool rbd.Pool, image, name, srcID string, fam rbd.Family, r *csi.CapacityRange, enc config.Encryption) (int64, error) {
	v := c.names.Volume(image, fam.Metadata)
	if v.Name != name {
		return 0, status.Errorf(codes.AlreadyExists, "image %s/%s already belongs to volume %q", pool.Name, image, v.Name)
	}
	if v.Source != srcID {
		return 0, status.Errorf(codes.AlreadyExists, "volume %s already exists with another content source", name)
	}
	if r.GetRequiredBytes() > 0 && !fits(int64(fam.Size), r) {
		return 0, status.Errorf(codes.AlreadyExists, "volume %s already exists with size %d bytes, which does not fit the requested range", name, fam.Size)
	}
	if err := sameEncryption(v, enc, name); err != nil {
		return 0, err
	}
	if vol, err := volid.DecodeVolume(srcID); err == nil {
		// The temporary snapshot of a volume clone may outlive a crash.
		c.dropTmpSnap(ctx, pool.WithName(vol.Pool), vol.Image, c.names.TmpSnap(name))
	}
	if fam.Parent != nil && v.Depth > c.opts.CloneDepthSoft {
		c.up.Flatten(pool, image, fam.Parent)
		if v.Depth > c.opts.CloneDepthHard {
			return 0, status.Errorf(codes.Aborted, "volume %s is %d clones deep and is being flattened; retry", name, v.Depth)
		}
	}
	return int64(fam.Size), nil
}

func (c *Controller) removeUnfinished(ctx context.Context, pool rbd.Pool, image, name string) error {
	klog.InfoS("removing unfinished image left by an earlier attempt", "name", name, "pool", pool.Name, "image", image)
	err := c.backend.RemoveImage(ctx, pool, image)
	switch {
	case err == nil, errors.Is(err, rbd.ErrNotFound):
		return nil
	case errors.Is(err, rbd.ErrBusy):
		return status.Errorf(codes.Aborted, "an earlier attempt to create volume %s is still running; retry later", name)
	default:
		return cephStatus(err)
	}
}

// resolveSource finds the parent snapshot; for a volume source it takes a
// temporary snapshot to clone from. An encrypted parent's data key is
// wrapped for the new volume (childVolumeKey) first: a refusal leaves
// nothing behind.
func (c *Controller) resolveSource(ctx context.Context, pool rbd.Pool, image string, params config.Params, name string, cs *csi.VolumeContentSource, secrets map[string]string) (source, error) {
	clusterID := params.ClusterID
	if s := cs.GetSnapshot(); s != nil {
		snap, err := volid.DecodeSnapshot(s.GetSnapshotId())
		if err != nil {
			return source{}, status.Errorf(codes.NotFound, "snapshot %.130q does not exist", s.GetSnapshotId())
		}
		if !c.sameCluster(snap.ClusterID, clusterID) {
			return source{}, status.Errorf(codes.InvalidArgument, "snapshot %s is in cluster %s, not in the StorageClass's cluster %s", s.GetSnapshotId(), snap.ClusterID, clusterID)
		}
		ppool := pool.WithName(snap.Pool)
		fam, err := c.backend.StatFamily(ctx, ppool, "", snap.ImageID)
		if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
			return source{}, status.Errorf(codes.NotFound, "snapshot %s does not exist", s.GetSnapshotId())
		}
		if err != nil {
			return source{}, cephStatus(err)
		}
		info, ok := findSnap(fam.Snaps, snap.Snap)
		if !ok {
			return source{}, status.Errorf(codes.NotFound, "snapshot %s does not exist", s.GetSnapshotId())
		}
		if err := cloneable(fam, "snapshot "+s.GetSnapshotId()); err != nil {
			return source{}, err
		}
		if err := notPrimary(fam, "the volume of snapshot "+s.GetSnapshotId()); err != nil {
			return source{}, err
		}
		// A snapshot's image keeps the key record of the volume it was
		// taken of, also once that volume is deleted (a hidden image).
		parent := c.names.Volume(fam.Name, fam.Metadata)
		key, err := c.childVolumeKey(ctx, ppool, parent, "snapshot "+s.GetSnapshotId(), pool, image, name, params.Encryption, secrets)
		if err != nil {
			return source{}, err
		}
		return source{id: s.GetSnapshotId(), pool: ppool, image: fam.Name, snap: snap.Snap, size: info.Size, depth: parent.Depth, key: key}, nil
	}
	v := cs.GetVolume()
	vol, err := volid.DecodeVolume(v.GetVolumeId()) // ours or a static volume's
	if err != nil {
		return source{}, status.Errorf(codes.NotFound, "volume %.130q does not exist", v.GetVolumeId())
	}
	if !c.sameCluster(vol.ClusterID, clusterID) {
		return source{}, status.Errorf(codes.InvalidArgument, "volume %s is in cluster %s, not in the StorageClass's cluster %s", v.GetVolumeId(), vol.ClusterID, clusterID)
	}
	ppool := pool.WithName(vol.Pool)
	release, ok := c.locks.TryLock("vol/"+v.GetVolumeId(), records.ImageLock(ppool, vol.Image))
	if !ok {
		return source{}, pending("volume " + v.GetVolumeId())
	}
	defer release()
	c.up.Touch(ppool, vol.Image)
	fam, err := c.family(ctx, ppool, vol)
	if err != nil {
		return source{}, err
	}
	if err := cloneable(fam, "volume "+v.GetVolumeId()); err != nil {
		return source{}, err
	}
	if err := notPrimary(fam, "volume "+v.GetVolumeId()); err != nil {
		return source{}, err
	}
	parent := c.names.Volume(vol.Image, fam.Metadata)
	key, err := c.childVolumeKey(ctx, ppool, parent, "volume "+v.GetVolumeId(), pool, image, name, params.Encryption, secrets)
	if err != nil {
		return source{}, err
	}
	tmp := c.names.TmpSnap(name)
	if _, ok := findSnap(fam.Snaps, tmp); !ok {
		if len(fam.Snaps) >= c.opts.MaxSnapshotsPerImage {
			return source{}, status.Errorf(codes.ResourceExhausted, "volume %s has %d snapshots, the most this driver allows; a clone needs one more", v.GetVolumeId(), len(fam.Snaps))
		}
		if !c.names.IsVolumeImage(vol.Image) {
			if err := c.indexStaticTmp(ctx, ppool, vol.Image); err != nil {
				return source{}, err
			}
		}
		if err := c.backend.CreateSnapshot(ctx, ppool, vol.Image, tmp); err != nil && !errors.Is(err, rbd.ErrExists) {
			return source{}, cephStatus(err)
		}
	}
	c.opts.Fault("CreateVolume:source-snapshot")
	return source{id: v.GetVolumeId(), pool: ppool, image: vol.Image, snap: tmp, size: fam.Size, depth: parent.Depth, key: key}, nil
}

// cloneable refuses a parent without the layering feature, which RBD
// clones need. Our images always have it; a static volume's may not, and
// layering cannot be enabled on an existing image.
func cloneable(fam rbd.Family, what string) error {
	if slices.Contains(fam.Features, "layering") {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s cannot be restored or cloned: its image %s lacks the layering feature (features: %s), which RBD clones need and which cannot be enabled on an existing image; copy the data into a volume of this driver instead", what, fam.Name, strings.Join(fam.Features, ","))
}

// dropTmpSnap deletes the snapshot a volume clone was made from. RBD moves
// it to its trash namespace while the clone depends on it.
func (c *Controller) dropTmpSnap(ctx context.Context, pool rbd.Pool, image, snap string) {
	fam, err := c.backend.StatFamily(ctx, pool, image, "")
	if err != nil {
		return
	}
	if _, ok := findSnap(fam.Snaps, snap); ok {
		if err := c.backend.RemoveSnapshot(ctx, pool, fam.ID, snap); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			klog.ErrorS(err, "removing a clone's temporary snapshot; the next retry removes it", "pool", pool.Name, "image", image, "snap", snap)
			return
		}
	}
	if !c.names.IsVolumeImage(image) {
		c.unindexStaticTmp(ctx, pool, image)
	}
}

// cloneSize is the requested size, or the source's when none is asked;
// a clone smaller than its source cannot be made.
func cloneSize(r *csi.CapacityRange, srcSize uint64) (uint64, error) {
	if r.GetRequiredBytes() == 0 && r.GetLimitBytes() == 0 {
		return srcSize, nil
	}
	size, invalid, outOfRange := sizeFor(r)
	if invalid != nil {
		return 0, status.Error(codes.InvalidArgument, invalid.Error())
	}
	if outOfRange != nil {
		return 0, status.Error(codes.OutOfRange, outOfRange.Error())
	}
	if r.GetRequiredBytes() == 0 {
		size = int64(srcSize)
	}
	if uint64(size) < srcSize {
		return 0, status.Errorf(codes.OutOfRange, "the source holds %d bytes; a volume made from it cannot be smaller (asked: %d)", srcSize, size)
	}
	if lim := r.GetLimitBytes(); lim > 0 && uint64(lim) < srcSize {
		return 0, status.Errorf(codes.OutOfRange, "the source holds %d bytes, over the limit of %d", srcSize, lim)
	}
	return uint64(size), nil
}

func sourceID(cs *csi.VolumeContentSource) string {
	if s := cs.GetSnapshot(); s != nil {
		return s.GetSnapshotId()
	}
	return cs.GetVolume().GetVolumeId()
}
