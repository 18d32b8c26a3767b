package node

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// NodeStageVolume maps the image and, for a filesystem volume, mounts it at
// the staging path, formatting it first only if it holds nothing at all.
func (n *Node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	a, err := n.checkStage(req)
	if err != nil {
		return nil, err
	}
	rec, release, err := n.lockRecord(a.id)
	if err != nil {
		return nil, err
	}
	defer release()
	a.mounter = n.stageMounter(a.params, rec)
	m, err := n.mapperFor(a.mounter)
	if err != nil {
		return nil, err
	}
	if rec, err = n.reconcileStage(ctx, a, rec); err != nil {
		return nil, err
	}
	cl, err := n.clusters.Lookup(a.vol.ClusterID)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v (this node's cluster map does not know it)", a.id, err)
	}
	cred, err := n.callCredentials(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	// Also for a volume staged here already: once its attachment moved to
	// another node (a force detach of this one), a repeated stage must not
	// answer OK as if this node still owned it.
	if err := n.checkAttached(ctx, a.vol, cl, cred, a.cap.AccessMode); err != nil {
		return nil, err
	}
	// Before the map, so that a mapping is never there unrecorded by a
	// stage that went well.
	n.recordAddress(ctx, cl, cred)
	if rec != nil && rec.Staged {
		heal := healSource{secrets: req.GetSecrets(), volCtx: req.GetVolumeContext(), call: "NodeStageVolume"}
		intact, err := n.intactOrHealed(ctx, rec, m, heal)
		if err != nil {
			return nil, statusFor(err)
		}
		if intact {
			return &csi.NodeStageVolumeResponse{}, nil
		}
		// A reboot, or someone else, took the mount or the mapping away:
		// stage again on top of the record.
		klog.InfoS("staged volume lost its mount or mapping; staging it again", "volumeID", a.id)
	}
	if err := n.stageAnew(ctx, a, rec, m, cl, cred); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageArgs is a NodeStageVolume request, checked.
type stageArgs struct {
	id, staging string
	cap         capSpec
	vol         volid.Volume
	params      config.Params
	mounter     string // resolved under the volume's lock (stageMounter)
	secrets     map[string]string
}

// checkStage validates a stage request before anything is locked or read.
func (n *Node) checkStage(req *csi.NodeStageVolumeRequest) (stageArgs, error) {
	a := stageArgs{id: req.GetVolumeId(), staging: req.GetStagingTargetPath(), secrets: req.GetSecrets()}
	if err := checkVolumePath(a.id, "staging target path", a.staging); err != nil {
		return a, err
	}
	var err error
	if a.cap, err = capability(req.GetVolumeCapability()); err != nil {
		return a, err
	}
	if a.vol, err = decodeID(a.id); err != nil {
		return a, err
	}
	if a.params, err = volumeParams(a.vol, req.GetVolumeContext()); err != nil {
		return a, status.Error(codes.InvalidArgument, err.Error())
	}
	// CreateVolume checked them for the StorageClass's filesystem; the
	// capability's is the one mkfs makes.
	if !a.cap.Block && len(a.params.MkfsOptions) > 0 {
		if err := config.CheckMkfsOptions(a.cap.FsType, a.params.MkfsOptions); err != nil {
			return a, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if a.params.Mounter != "" {
		if _, err := n.mapperFor(a.params.Mounter); err != nil {
			return a, err
		}
	}
	return a, nil
}

// stageMounter picks the mapper. Without a mounter in the context, a
// volume keeps the one it was staged with: a changed --default-mounter
// applies to new stages only.
func (n *Node) stageMounter(params config.Params, rec *record) string {
	switch {
	case params.Mounter != "":
		return params.Mounter
	case rec != nil:
		return rec.Mounter
	}
	return n.defaultMounter
}

// reconcileStage squares a request with what the node recorded earlier.
// The remains of a stage that never finished, with other arguments, are
// undone (the returned record is then nil); a finished stage with other
// arguments is refused.
func (n *Node) reconcileStage(ctx context.Context, a stageArgs, rec *record) (*record, error) {
	if rec == nil {
		return nil, nil
	}
	same := rec.Cap.equal(a.cap) && rec.Mounter == a.mounter
	if !rec.Staged && (rec.StagingPath != a.staging || !same) {
		old, err := n.mapperFor(rec.Mounter)
		if err != nil {
			return nil, err
		}
		if err := n.unmountAndUnmap(ctx, rec, old); err != nil {
			return nil, statusFor(fmt.Errorf("cleaning up an unfinished stage of volume %s: %w", a.id, err))
		}
		if err := n.store.remove(a.id); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, nil
	}
	switch {
	case rec.StagingPath != a.staging:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is already staged at %s", a.id, rec.StagingPath)
	case !same:
		return nil, status.Errorf(codes.AlreadyExists, "volume %s is already staged at %s with another capability or mounter", a.id, a.staging)
	}
	return rec, nil
}

// stageAnew maps and mounts, on top of rec when a stage was recorded
// before. The record goes down before the first change on the node, so
// that whatever a crash leaves behind, unstage knows of it.
func (n *Node) stageAnew(ctx context.Context, a stageArgs, rec *record, m mapper.Mapper, cl cluster.Cluster, cred cluster.Credentials) error {
	if err := m.Supported(ctx); err != nil {
		return statusFor(err)
	}
	if err := checkDir(a.staging); err != nil {
		return err
	}
	// ParseParams checked every mapper's options: these cannot fail for a
	// known mounter, and report clearly if they ever do.
	mapOpts, err := config.OptionsFor(config.ParamMapOptions, a.params.MapOptions, a.mounter)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !n.insecureMap {
		if err := config.CheckMapOptionsSecure(a.params.MapOptions); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	unmapOpts, err := config.OptionsFor(config.ParamUnmapOptions, a.params.UnmapOptions, a.mounter)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	key, err := n.unlock(ctx, a.vol, cl, cred, a.params.Encryption, a.secrets)
	if err != nil {
		return err
	}
	defer key.clear()
	img := mapper.Image{ClusterID: a.vol.ClusterID, Pool: a.vol.Pool, Namespace: cl.Namespace(), Name: a.vol.Image}
	if rec == nil {
		rec = &record{VolumeID: a.id, Image: img, Mounter: a.mounter, StagingPath: a.staging, Cap: a.cap}
	}
	rec.UnmapOptions, rec.Staged = unmapOpts, false
	if err := n.store.save(rec); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := n.stage(ctx, rec, m, a.params, key, mapper.MapRequest{
		Image: img, MonHost: cl.MonHost(), Cred: cred, Options: mapOpts, ReadOnly: a.cap.readerOnly(),
		Cookie: nbdCookie(a.id),
	}); err != nil {
		n.undoStage(ctx, rec, m)
		return statusFor(err)
	}
	klog.V(2).InfoS("staged volume", "volumeID", a.id, "device", rec.Device, "mounter", a.mounter, "stagingPath", a.staging)
	return nil
}

// stage does the work: map, record the device, open the encryption of an
// encrypted volume (key), format if empty, mount.
func (n *Node) stage(ctx context.Context, rec *record, m mapper.Mapper, params config.Params, key *volumeKey, mreq mapper.MapRequest) error {
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
	if key != nil {
		if err := n.openCrypt(ctx, rec, key); err != nil {
			return err
		}
	}
	if !rec.Cap.Block {
		blank := blankUnknown
		if params.CreatedEmpty && !params.Static {
			blank = blankZeros
			if rec.Crypt != "" {
				blank = blankFresh
			}
		}
		if err := n.mountStaging(ctx, rec, params.MkfsOptions, blank); err != nil {
			return err
		}
	}
	rec.Staged = true
	return n.store.save(rec)
}

// mountStaging formats the device if (and only if) it holds nothing, then
// mounts it at the staging path.
func (n *Node) mountStaging(ctx context.Context, rec *record, mkfsOptions []string, blank blankness) error {
	dev := rec.dataDevice()
	if ours, err := n.mountedFrom(rec.StagingPath, dev, false); err != nil || ours {
		return err // a retry after a crash that came after the mount
	}
	if mounted, err := n.isMountPoint(rec.StagingPath); err != nil || mounted {
		if err == nil {
			err = status.Errorf(codes.FailedPrecondition, "staging path %s is already a mount point of something else", rec.StagingPath)
		}
		return err
	}
	format, err := n.diskFormat(ctx, dev)
	if err != nil {
		return err
	}
	fsType := rec.Cap.FsType
	switch {
	case format == "" && rec.Cap.readerOnly():
		return status.Errorf(codes.FailedPrecondition, "volume %s holds no filesystem and its access mode %s is read-only: it will not be formatted", rec.VolumeID, rec.Cap.AccessMode)
	case format == "":
		var size int64 // only xfs's defaults depend on it
		if fsType == "xfs" && len(mkfsOptions) == 0 {
			if size, err = blockdev.Size(dev); err != nil {
				return fmt.Errorf("volume %s: %s", rec.VolumeID, deviceGone(dev, err))
			}
		}
		name, args := mkfsArgs(fsType, mkfsOptions, dev, size, blank, n.mkfsPrezeroed)
		klog.InfoS("formatting empty volume", "volumeID", rec.VolumeID, "device", dev, "command", name, "args", args)
		// runs: mkfs.ext4 mkfs.xfs (mkfsArgs)
		if _, err := n.run.Run(ctx, name, args...); err != nil {
			return fmt.Errorf("formatting volume %s (%s on %s): %w", rec.VolumeID, name, dev, err)
		}
	case format != fsType:
		return status.Errorf(codes.FailedPrecondition, "volume %s holds %s, not %s: refusing to mount it as %s or to format it", rec.VolumeID, format, fsType, fsType)
	case fsType == "ext4" && !rec.Cap.readerOnly():
		// Expanded while not staged: grow now, offline, which needs
		// none of the capabilities online resize does.
		if err := n.growExt4Offline(ctx, dev); err != nil {
			return fmt.Errorf("volume %s: growing its ext4 on %s to the expanded size: %w", rec.VolumeID, dev, err)
		}
	}
	created := false
	if _, err := os.Stat(rec.StagingPath); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(rec.StagingPath, 0o750); err != nil {
			return pathStatus("creating the staging path", rec.StagingPath, err)
		}
		created = true
	}
	opts := append([]string{}, rec.Cap.MountFlags...)
	if fsType == "ext4" && blank == blankZeros {
		// The groups an offline grow adds are left for the kernel to
		// zero (resize2fs marks none zeroed); on an image created empty
		// they read as zeros already. First, so the volume's own mount
		// flags can say init_itable.
		opts = append([]string{"noinit_itable"}, opts...)
	}
	if fsType == "xfs" {
		opts = append(opts, "nouuid") // clones share their source's UUID
	}
	if rec.Cap.readerOnly() {
		opts = append(opts, "ro")
	}
	if err := n.mounter.Mount(dev, rec.StagingPath, fsType, opts); err != nil {
		if created {
			logUndo("remove "+rec.StagingPath, os.Remove(rec.StagingPath))
		}
		return fmt.Errorf("mounting volume %s at %s: %w", rec.VolumeID, rec.StagingPath, err)
	}
	if fsType == "xfs" && !rec.Cap.readerOnly() {
		// xfs only grows mounted; a no-op when it fills the device.
		if _, err := n.run.Run(ctx, "xfs_growfs", rec.StagingPath); err != nil {
			logUndo("unmount "+rec.StagingPath, n.unmountAll(rec.StagingPath))
			return fmt.Errorf("volume %s: growing its xfs at %s to the expanded size: %w", rec.VolumeID, rec.StagingPath, err)
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
	if rec.Cap.Block && rec.Crypt != "" {
		_, err := devNumber(rec.dataDevice()) // the dm-crypt device is open
		return err == nil, nil
	}
	if rec.Cap.Block {
		return true, nil
	}
	return n.mountedFrom(rec.StagingPath, rec.dataDevice(), false)
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

// unmountAndUnmap unmounts the staging path (when it is ours), closes the
// encryption and unmaps.
func (n *Node) unmountAndUnmap(ctx context.Context, rec *record, m mapper.Mapper) error {
	if !rec.Cap.Block {
		ours, err := n.mountedFrom(rec.StagingPath, rec.dataDevice(), false)
		if err != nil {
			return err
		}
		if ours {
			if err := n.unmountAll(rec.StagingPath); err != nil {
				return err
			}
		}
	}
	if err := n.closeCrypt(ctx, rec); err != nil {
		return err
	}
	req := mapper.UnmapRequest{Image: rec.Image, Device: rec.Device, Options: rec.UnmapOptions}
	if rec.Mounter == mapper.Fuse {
		// Only rbd-fuse can hold a device on a fenced client's writes
		// (krbd and rbd-nbd fail them): other unmaps cost no registry read.
		req.Fenced = n.fenced(ctx, rec.VolumeID)
	}
	return m.Unmap(ctx, req)
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
		return pathStatus("checking the staging path", path, err)
	case !st.IsDir():
		return status.Errorf(codes.InvalidArgument, "%s exists and is not a directory", path)
	}
	return nil
}
