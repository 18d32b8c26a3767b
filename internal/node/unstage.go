package node

import (
	"context"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// NodeUnstageVolume unmounts the staging path, unmaps the image and drops
// the record, then lifts this node's fence of the volume if the
// controller put one. Nothing staged (never, or no more) is a success.
func (n *Node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	vol, rec, release, err := n.begin(id, "staging target path", staging)
	if err != nil {
		return nil, err
	}
	defer release()
	if rec == nil {
		// No record: never staged here, or the state was lost. Clean up
		// only what provably belongs to this image.
		if err := n.unstageUnrecorded(ctx, vol, staging); err != nil {
			return nil, statusFor(err)
		}
		n.liftFence(ctx, vol)
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if rec.StagingPath != staging {
		return &csi.NodeUnstageVolumeResponse{}, nil // not staged at this path
	}
	if busy, err := n.liveTargets(rec); err != nil || len(busy) > 0 {
		if err == nil {
			err = status.Errorf(codes.FailedPrecondition, "volume %s is still published at %s; unpublish it first", id, strings.Join(busy, ", "))
		}
		return nil, statusFor(err)
	}
	m, err := n.mapperFor(rec.Mounter)
	if err != nil {
		return nil, err
	}
	rec.Staged = false // from here on, a crash leaves an unfinished stage
	if err := n.store.save(rec); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := n.unmountAndUnmap(ctx, rec, m); err != nil {
		return nil, statusFor(err)
	}
	if err := n.store.remove(id); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	klog.V(2).InfoS("unstaged volume", "volumeID", id, "stagingPath", staging)
	n.liftFence(ctx, vol)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// liveTargets drops recorded targets that are no longer mounted and
// returns those that still are.
func (n *Node) liveTargets(rec *record) ([]string, error) {
	var live []string
	for path, t := range rec.Targets {
		ours, err := n.mountedFrom(path, rec.dataDevice(), t.Cap.Block)
		if err != nil {
			return nil, err
		}
		if ours {
			live = append(live, path)
		} else {
			delete(rec.Targets, path)
		}
	}
	return live, nil
}

// unstageUnrecorded handles an unstage without a record: it unmounts the
// staging path only if a device mapped for this very image is mounted
// there, and unmaps such devices.
func (n *Node) unstageUnrecorded(ctx context.Context, vol volid.Volume, staging string) error {
	img := n.imageOf(vol)
	for _, name := range mapperNames(n.mappers) {
		m := n.mappers[name]
		if m.Supported(ctx) != nil {
			continue // nothing can be mapped with it here
		}
		list, err := m.List(ctx)
		if err != nil {
			return err
		}
		mp, ok := mapper.Find(list, img)
		if !ok {
			continue
		}
		klog.InfoS("unstaging a volume without a state record", "volumeID", vol.String(), "mounter", name, "device", mp.Device)
		crypt, err := n.cryptOn(ctx, mp.Device)
		if err != nil {
			return err
		}
		rec := &record{VolumeID: vol.String(), Image: img, Device: mp.Device, StagingPath: staging, Crypt: crypt}
		if err := n.unmountAndUnmap(ctx, rec, m); err != nil {
			return err
		}
	}
	return nil
}

// imageDevices lists the devices mapped for the volume's image by any
// mapper that works on this node.
func (n *Node) imageDevices(ctx context.Context, vol volid.Volume) []string {
	img := n.imageOf(vol)
	var devs []string
	for _, name := range mapperNames(n.mappers) {
		m := n.mappers[name]
		if m.Supported(ctx) != nil {
			continue
		}
		if list, err := m.List(ctx); err == nil {
			if mp, ok := mapper.Find(list, img); ok && mp.Device != "" {
				devs = append(devs, mp.Device)
			}
		}
	}
	return devs
}

// imageOf names the volume's image for calls without a state record; the
// namespace comes from the cluster map (none if the map no longer knows
// the cluster).
func (n *Node) imageOf(vol volid.Volume) mapper.Image {
	img := mapper.Image{ClusterID: vol.ClusterID, Pool: vol.Pool, Name: vol.Image}
	if cl, err := n.clusters.Lookup(vol.ClusterID); err == nil {
		img.Namespace = cl.Namespace()
	}
	return img
}
