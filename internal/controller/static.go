package controller

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Static volumes are images this driver did not create (rbd create,
// ceph-csi, the in-tree plugin), handed to it by an admin in a PV with
// volumeAttributes staticVolume: "true". The controller attaches and
// expands them like its own but never creates or removes them: only
// images named like its own (isVolumeImage) are ever deleted.
//
// Their volumeHandle is an ordinary volume ID, v1:<clusterID>:<pool>:<image>,
// because detach and expand carry no volume attributes: the ID alone must
// find the image.

// checkVolumeContext squares a volume ID with the volume attributes that
// come with publish and validate calls. An image not named like ours is
// used only where the attributes say staticVolume, and then their
// clusterID and pool must be the ID's. Bad attributes are InvalidArgument
// with what to write instead.
func (c *Controller) checkVolumeContext(id string, volCtx map[string]string) (volid.Volume, error) {
	static := volCtx[config.ParamStaticVolume] != "" && volCtx[config.ParamStaticVolume] != "false"
	vol, decodeErr := volid.DecodeVolume(id)
	if !static {
		if decodeErr != nil {
			return volid.Volume{}, status.Errorf(codes.NotFound, "volume %.130q does not exist", id)
		}
		if !c.names.IsVolumeImage(vol.Image) {
			return volid.Volume{}, status.Errorf(codes.NotFound, "volume %s does not exist: image %s was not created by this driver; to use an existing image, set volumeAttributes %s: \"true\" in its PersistentVolume", id, vol.Image, config.ParamStaticVolume)
		}
		return vol, nil
	}
	p, err := config.ParseVolumeContext(volCtx)
	if err != nil {
		return volid.Volume{}, status.Errorf(codes.InvalidArgument, "static volume %.130q: volumeAttributes: %v", id, err)
	}
	if decodeErr != nil {
		want := volid.Volume{ClusterID: p.ClusterID, Pool: p.Pool, Image: id}
		if want.Validate() == nil {
			return volid.Volume{}, status.Errorf(codes.InvalidArgument, "static volume %.130q: set the PersistentVolume's volumeHandle to %s (v1:<clusterID>:<pool>:<image>): detach and expand find the image by the handle alone", id, want)
		}
		return volid.Volume{}, status.Errorf(codes.InvalidArgument, "static volume %.130q: the volumeHandle must be v1:<clusterID>:<pool>:<image>, with a clusterID, pool and image name of letters, digits, '-', '_' and '.', at most %d bytes in all", id, volid.MaxLen)
	}
	if vol.ClusterID != p.ClusterID || vol.Pool != p.Pool {
		return volid.Volume{}, status.Errorf(codes.InvalidArgument, "static volume %s: the volumeHandle names clusterID %s and pool %s, its volumeAttributes clusterID %s and pool %s; make them agree", id, vol.ClusterID, vol.Pool, p.ClusterID, p.Pool)
	}
	return vol, nil
}

// indexStaticTmp records that a clone is about to snapshot a static image.
func (c *Controller) indexStaticTmp(ctx context.Context, pool rbd.Pool, image string) error {
	if err := c.staticTmps.Add(ctx, pool, image, ""); err != nil {
		return cephStatus(fmt.Errorf("indexing the temporary snapshot of static image %s: %w", image, err))
	}
	return nil
}

// unindexStaticTmp drops a static image's index entry once it has no
// temporary snapshot left. It needs the image's key, which a clone holds
// while it indexes and takes its snapshot; when that is busy, or anything
// fails, the entry is left for the sweep.
func (c *Controller) unindexStaticTmp(ctx context.Context, pool rbd.Pool, image string) {
	release, ok := c.locks.TryLock(records.ImageLock(pool, image))
	if !ok {
		return
	}
	defer release()
	fam, err := c.backend.StatFamily(ctx, pool, image, "")
	if err != nil {
		return
	}
	for _, s := range fam.Snaps {
		if records.IsTmpSnap(s.Name) {
			return
		}
	}
	if err := c.staticTmps.Drop(ctx, pool, image); err != nil {
		klog.ErrorS(err, "unindexing a static image's temporary snapshot; the sweep does it later", "pool", pool.Name, "image", image)
	}
}
