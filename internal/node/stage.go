package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// NodeStageVolume maps the image and, for a filesystem volume, mounts it at
// the staging path, formatting it first only if it holds nothing at all.
func (n *Node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := checkVolumePath(id, "staging target path", staging); err != nil {
		return nil, err
	}
	capSpec, err := capability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	vol, err := decodeID(id)
	if err != nil {
		return nil, err
	}
	params, err := volumeParams(vol, req.GetVolumeContext())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if params.Mounter != "" {
		if _, err := n.mapperFor(params.Mounter); err != nil {
			return nil, err
		}
	}
	rec, release, err := n.lockRecord(id)
	if err != nil {
		return nil, err
	}
	defer release()
	// Without a mounter in the context, a volume keeps the one it was
	// staged with: a changed --default-mounter applies to new stages only.
	mounterName := params.Mounter
	switch {
	case mounterName != "":
	case rec != nil:
		mounterName = rec.Mounter
	default:
		mounterName = n.defaultMounter
	}
	m, err := n.mapperFor(mounterName)
	if err != nil {
		return nil, err
	}
	if rec != nil && !rec.Staged && (rec.StagingPath != staging || !rec.Cap.equal(capSpec) || rec.Mounter != mounterName) {
		// The remains of a stage that never finished, with other
		// arguments: undo them and start afresh.
		old, err := n.mapperFor(rec.Mounter)
		if err != nil {
			return nil, err
		}
		if err := n.unmountAndUnmap(ctx, rec, old); err != nil {
			return nil, statusFor(fmt.Errorf("cleaning up an unfinished stage of volume %s: %w", id, err))
		}
		if err := n.store.remove(id); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		rec = nil
	}
	if rec != nil {
		switch {
		case rec.StagingPath != staging:
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is already staged at %s", id, rec.StagingPath)
		case !rec.Cap.equal(capSpec) || rec.Mounter != mounterName:
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is already staged at %s with another capability or mounter", id, staging)
		}
	}

	cluster, err := n.clusters.Lookup(vol.ClusterID)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v (this node's cluster map does not know it)", id, err)
	}
	cred, err := config.CredentialsFromSecrets(req.GetSecrets())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Also for a volume staged here already: once its attachment moved to
	// another node (a force detach of this one), a repeated stage must not
	// answer OK as if this node still owned it.
	if err := n.checkAttached(ctx, vol, cluster, cred, capSpec.AccessMode); err != nil {
		return nil, err
	}
	if rec != nil {
		if rec.Staged {
			intact, err := n.stageIntact(ctx, rec, m)
			if err != nil {
				return nil, statusFor(err)
			}
			if intact {
				return &csi.NodeStageVolumeResponse{}, nil
			}
			// A reboot, or someone else, took the mount or the mapping
			// away: stage again on top of the record.
			klog.InfoS("staged volume lost its mount or mapping; staging it again", "volumeID", id)
		}
	}
	if err := m.Supported(ctx); err != nil {
		return nil, statusFor(err)
	}
	if err := checkDir(staging); err != nil {
		return nil, err
	}
	// ParseParams checked every mapper's options: these cannot fail for a
	// known mounter, and report clearly if they ever do.
	mapOpts, err := config.OptionsFor(config.ParamMapOptions, params.MapOptions, mounterName)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	unmapOpts, err := config.OptionsFor(config.ParamUnmapOptions, params.UnmapOptions, mounterName)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	img := mapper.Image{ClusterID: vol.ClusterID, Pool: vol.Pool, Namespace: cluster.Namespace(), Name: vol.Image}
	if rec == nil {
		rec = &record{VolumeID: id, Image: img, Mounter: mounterName, StagingPath: staging, Cap: capSpec}
	}
	rec.UnmapOptions, rec.Staged = unmapOpts, false
	// The record goes down before the first change on the node, so that
	// whatever a crash leaves behind, unstage knows of it.
	if err := n.store.save(rec); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := n.stage(ctx, rec, m, params, mapper.MapRequest{
		Image: img, MonHost: cluster.MonHost(), Cred: cred, Options: mapOpts, ReadOnly: capSpec.readerOnly(),
	}); err != nil {
		n.undoStage(ctx, rec, m)
		return nil, statusFor(err)
	}
	klog.V(2).InfoS("staged volume", "volumeID", id, "device", rec.Device, "mounter", mounterName, "stagingPath", staging)
	return &csi.NodeStageVolumeResponse{}, nil
}

// stage does the work: map, record the device, format if empty, mount.
func (n *Node) stage(ctx context.Context, rec *record, m mapper.Mapper, params config.Params, mreq mapper.MapRequest) error {
	dev, err := m.Map(ctx, mreq)
	if err != nil {
		if hinted := mreq.Cred.UnusableKey(err); hinted != err {
			return status.Error(codes.InvalidArgument, hinted.Error())
		}
		return err
	}
	rec.Device = dev
	if err := n.store.save(rec); err != nil {
		return err
	}
	n.fault("NodeStage:mapped")
	if !rec.Cap.Block {
		if err := n.mountStaging(ctx, rec, params.MkfsOptions); err != nil {
			return err
		}
	}
	rec.Staged = true
	return n.store.save(rec)
}

// mountStaging formats the device if (and only if) it holds nothing, then
// mounts it at the staging path.
func (n *Node) mountStaging(ctx context.Context, rec *record, mkfsOptions []string) error {
	if ours, err := n.mountedFrom(rec.StagingPath, rec.Device, false); err != nil || ours {
		return err // a retry after a crash that came after the mount
	}
	if mounted, err := n.isMountPoint(rec.StagingPath); err != nil || mounted {
		if err == nil {
			err = status.Errorf(codes.FailedPrecondition, "staging path %s is already a mount point of something else", rec.StagingPath)
		}
		return err
	}
	format, err := n.diskFormat(ctx, rec.Device)
	if err != nil {
		return err
	}
	fsType := rec.Cap.FsType
	switch {
	case format == "" && rec.Cap.readerOnly():
		return status.Errorf(codes.FailedPrecondition, "volume %s holds no filesystem and its access mode %s is read-only: it will not be formatted", rec.VolumeID, rec.Cap.AccessMode)
	case format == "":
		name, args := mkfsArgs(fsType, mkfsOptions, rec.Device)
		klog.InfoS("formatting empty volume", "volumeID", rec.VolumeID, "device", rec.Device, "command", name, "args", args)
		// runs: mkfs.ext4 mkfs.xfs (mkfsArgs)
		if _, err := n.run.Run(ctx, name, args...); err != nil {
			return fmt.Errorf("formatting volume %s: %w", rec.VolumeID, err)
		}
	case format != fsType:
		return status.Errorf(codes.FailedPrecondition, "volume %s holds %s, not %s: refusing to mount it as %s or to format it", rec.VolumeID, format, fsType, fsType)
	case fsType == "ext4" && !rec.Cap.readerOnly():
		// Expanded while not staged: grow now, offline, which needs
		// none of the capabilities online resize does.
		if err := n.growExt4Offline(ctx, rec.Device); err != nil {
			return fmt.Errorf("volume %s: %w", rec.VolumeID, err)
		}
	}
	created := false
	if _, err := os.Stat(rec.StagingPath); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(rec.StagingPath, 0o750); err != nil {
			return fmt.Errorf("creating the staging path: %w", err)
		}
		created = true
	}
	opts := append([]string{}, rec.Cap.MountFlags...)
	if fsType == "xfs" {
		opts = append(opts, "nouuid") // clones share their source's UUID
	}
	if rec.Cap.readerOnly() {
		opts = append(opts, "ro")
	}
	if err := n.mounter.Mount(rec.Device, rec.StagingPath, fsType, opts); err != nil {
		if created {
			logUndo("remove "+rec.StagingPath, os.Remove(rec.StagingPath))
		}
		return fmt.Errorf("mounting volume %s at %s: %w", rec.VolumeID, rec.StagingPath, err)
	}
	if fsType == "xfs" && !rec.Cap.readerOnly() {
		// xfs only grows mounted; a no-op when it fills the device.
		if _, err := n.run.Run(ctx, "xfs_growfs", rec.StagingPath); err != nil {
			logUndo("unmount "+rec.StagingPath, n.unmountAll(rec.StagingPath))
			return fmt.Errorf("volume %s: growing the filesystem: %w", rec.VolumeID, err)
		}
	}
	return nil
}

// stageIntact reports whether a staged volume still has its mapping and,
// for a filesystem, its staging mount.
func (n *Node) stageIntact(ctx context.Context, rec *record, m mapper.Mapper) (bool, error) {
	list, err := m.List(ctx)
	if err != nil {
		return false, err
	}
	if mp, ok := mapper.Find(list, rec.Image); !ok || mp.Device != rec.Device {
		return false, nil
	}
	if rec.Cap.Block {
		return true, nil
	}
	return n.mountedFrom(rec.StagingPath, rec.Device, false)
}

// undoStage reverts a failed stage: unmount, unmap, and drop the record
// once nothing is left. If a step fails the record stays, so that
// NodeUnstageVolume can finish the job.
func (n *Node) undoStage(ctx context.Context, rec *record, m mapper.Mapper) {
	ctx = context.WithoutCancel(ctx) // the caller's deadline may be what failed
	if len(rec.Targets) > 0 {
		return // published targets still use it
	}
	if err := n.unmountAndUnmap(ctx, rec, m); err != nil {
		logUndo("unmount and unmap "+rec.VolumeID, err)
		return
	}
	logUndo("remove state of "+rec.VolumeID, n.store.remove(rec.VolumeID))
}

// unmountAndUnmap unmounts the staging path (when it is ours) and unmaps.
func (n *Node) unmountAndUnmap(ctx context.Context, rec *record, m mapper.Mapper) error {
	if !rec.Cap.Block {
		ours, err := n.mountedFrom(rec.StagingPath, rec.Device, false)
		if err != nil {
			return err
		}
		if ours {
			if err := n.unmountAll(rec.StagingPath); err != nil {
				return err
			}
		}
	}
	return m.Unmap(ctx, mapper.UnmapRequest{Image: rec.Image, Device: rec.Device, Options: rec.UnmapOptions})
}

// NodeUnstageVolume unmounts the staging path, unmaps the image and drops
// the record. Nothing staged (never, or no more) is a success.
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
		return &csi.NodeUnstageVolumeResponse{}, statusFor(n.unstageUnrecorded(ctx, vol, staging))
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
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// liveTargets drops recorded targets that are no longer mounted and
// returns those that still are.
func (n *Node) liveTargets(rec *record) ([]string, error) {
	var live []string
	for path, t := range rec.Targets {
		ours, err := n.mountedFrom(path, rec.Device, t.Cap.Block)
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
		rec := &record{VolumeID: vol.String(), Image: img, Device: mp.Device, StagingPath: staging}
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
	if cluster, err := n.clusters.Lookup(vol.ClusterID); err == nil {
		img.Namespace = cluster.Namespace()
	}
	return img
}

// checkDir refuses a staging path that exists and is no directory. A
// missing one is created only right before the mount needs it (the CO
// should have made it), so that a refused stage creates nothing.
func checkDir(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return status.Errorf(codes.Internal, "%s: %v", path, err)
	case !st.IsDir():
		return status.Errorf(codes.InvalidArgument, "%s exists and is not a directory", path)
	}
	return nil
}
