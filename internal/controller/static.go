package controller

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
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
		if !c.isVolumeImage(vol.Image) {
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
