package node

import (
	"context"
	"errors"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// NodePublishVolume bind-mounts the staged volume into a pod: the staging
// mount onto a target directory, or the device onto a target file.
func (n *Node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	capSpec, err := checkPublish(req)
	if err != nil {
		return nil, err
	}
	id, targetPath := req.GetVolumeId(), req.GetTargetPath()
	rec, release, err := n.lockRecord(id)
	if err != nil {
		return nil, err
	}
	defer release()
	heal := healSource{secrets: req.GetSecrets(), volCtx: req.GetVolumeContext(), call: "NodePublishVolume"}
	if err := n.checkStagedFor(ctx, rec, id, req.GetStagingTargetPath(), capSpec, heal); err != nil {
		return nil, err
	}
	t := target{Cap: capSpec, ReadOnly: req.GetReadonly() || capSpec.readerOnly()}
	done, err := n.reconcileTarget(rec, targetPath, t)
	if err != nil {
		return nil, err
	}
	if !done {
		if err := n.publish(rec, targetPath, t); err != nil {
			return nil, err
		}
	}
	n.capIO(rec, req)
	if done {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	klog.V(2).InfoS("published volume", "volumeID", id, "target", targetPath, "readOnly", t.ReadOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkPublish validates a publish request before anything is locked.
func checkPublish(req *csi.NodePublishVolumeRequest) (capSpec, error) {
	id, targetPath, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if err := checkVolumePath(id, "target path", targetPath); err != nil {
		return capSpec{}, err
	}
	c, err := capability(req.GetVolumeCapability())
	if err != nil {
		return capSpec{}, err
	}
	// No staging path means the volume is not staged: FailedPrecondition,
	// which csi-sanity checks.
	if staging == "" {
		return capSpec{}, status.Error(codes.FailedPrecondition, "staging target path is missing: the volume must be staged (NodeStageVolume) first")
	}
	if err := checkPath("staging target path", staging); err != nil {
		return capSpec{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if targetPath == staging {
		return capSpec{}, status.Error(codes.InvalidArgument, "target path and staging target path are the same")
	}
	if _, err := decodeID(id); err != nil {
		return capSpec{}, err
	}
	return c, nil
}

// checkStagedFor refuses to publish a volume that is not staged at the
// given path, as the same kind of volume, with its mount and mapping; an
// nbd mapping that lost its daemon is re-attached first, where the call
// brings the secrets for it.
func (n *Node) checkStagedFor(ctx context.Context, rec *record, id, staging string, c capSpec, heal healSource) error {
	switch {
	case rec == nil || !rec.Staged:
		return status.Errorf(codes.FailedPrecondition, "volume %s is not staged on this node; call NodeStageVolume first", id)
	case rec.StagingPath != staging:
		return status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s, not %s", id, rec.StagingPath, staging)
	case c.Block != rec.Cap.Block || c.FsType != rec.Cap.FsType:
		return status.Errorf(codes.FailedPrecondition, "volume %s is staged as %s; it cannot be published as %s", id, describe(rec.Cap), describe(c))
	}
	m, err := n.mapperFor(rec.Mounter)
	if err != nil {
		return err
	}
	// A record outlives a reboot; the mount and the mapping do not. Bind-
	// mounting an empty staging directory would hand the pod a directory
	// on the node's root disk.
	if intact, err := n.intactOrHealed(ctx, rec, m, heal); err != nil || !intact {
		if err == nil {
			err = status.Errorf(codes.FailedPrecondition, "volume %s lost its staging mount or mapping (node restarted?); stage it again", id)
		}
		return statusFor(err)
	}
	return nil
}

// reconcileTarget squares a publish with the targets recorded earlier. It
// reports done when the same publish is already in place, and refuses
// another capability at the same path or a second target of a
// single-writer volume.
func (n *Node) reconcileTarget(rec *record, path string, t target) (bool, error) {
	if old, ok := rec.Targets[path]; ok {
		if !old.Cap.equal(t.Cap) || old.ReadOnly != t.ReadOnly {
			return false, status.Errorf(codes.AlreadyExists, "volume %s is already published at %s with another capability or read-only flag", rec.VolumeID, path)
		}
		ours, err := n.mountedFrom(path, rec.dataDevice(), t.Cap.Block)
		// Recorded but not mounted: an earlier attempt stopped half-way.
		return ours, statusFor(err)
	}
	if t.Cap.AccessMode != csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER.String() {
		return false, nil
	}
	live, err := n.liveTargets(rec)
	if err == nil && len(live) > 0 {
		err = status.Errorf(codes.FailedPrecondition, "volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %s", rec.VolumeID, live[0])
	}
	return false, statusFor(err)
}

// publish records the target, then bind-mounts it; a failure undoes both.
func (n *Node) publish(rec *record, path string, t target) error {
	if mounted, err := n.isMountPoint(path); err != nil || mounted {
		if err == nil {
			err = status.Errorf(codes.FailedPrecondition, "target path %s is already a mount point of something else", path)
		}
		return statusFor(err)
	}
	created, err := prepareTarget(path, t.Cap.Block)
	if err != nil {
		return err
	}
	if rec.Targets == nil {
		rec.Targets = map[string]target{}
	}
	rec.Targets[path] = t
	if err := n.store.save(rec); err != nil {
		removeCreated(path, created)
		return status.Error(codes.Internal, err.Error())
	}
	if err := n.bindMount(rec, path, t); err != nil {
		logUndo("unmount "+path, n.unmountAll(path))
		removeCreated(path, created)
		delete(rec.Targets, path)
		logUndo("save state of "+rec.VolumeID, n.store.save(rec))
		return statusFor(err)
	}
	return nil
}

func describe(c capSpec) string {
	if c.Block {
		return "a raw block device"
	}
	return "an " + c.FsType + " filesystem"
}

// bindMount mounts the staging mount (filesystem) or the device (raw
// block) at the target. mount(8) makes a read-only or flagged bind mount
// in two steps (bind, then remount); a failure in the second leaves the
// first, which the caller undoes.
func (n *Node) bindMount(rec *record, path string, t target) error {
	source := rec.StagingPath
	opts := []string{"bind"}
	if t.Cap.Block {
		source = rec.dataDevice()
	} else {
		opts = append(opts, t.Cap.MountFlags...)
	}
	if t.ReadOnly {
		opts = append(opts, "ro") // last, so that no "rw" flag overrides it
	}
	return n.mounter.Mount(source, path, "", opts)
}

// prepareTarget makes sure the target exists with the right type: a
// directory for a filesystem, a file for raw block. It reports whether it
// created it (so that a failed publish removes only what it made).
func prepareTarget(path string, block bool) (bool, error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return false, pathStatus("checking the target path", path, err)
	case block && !st.Mode().IsRegular():
		return false, status.Errorf(codes.InvalidArgument, "target path %s exists and is not a file (a raw block volume is published as a file)", path)
	case !block && !st.IsDir():
		return false, status.Errorf(codes.InvalidArgument, "target path %s exists and is not a directory", path)
	default:
		return false, nil
	}
	if block {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			return false, pathStatus("creating the target file", path, err)
		}
		f.Close()
		return true, nil
	}
	if err := os.Mkdir(path, 0o750); err != nil {
		return false, pathStatus("creating the target directory", path, err)
	}
	return true, nil
}

func removeCreated(path string, created bool) {
	if created {
		logUndo("remove "+path, os.Remove(path))
	}
}

// NodeUnpublishVolume unmounts the target (when the volume is what is
// mounted there) and removes it. Nothing published is a success.
func (n *Node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, targetPath := req.GetVolumeId(), req.GetTargetPath()
	vol, rec, release, err := n.begin(id, "target path", targetPath)
	if err != nil {
		return nil, err
	}
	defer release()
	ours, err := n.targetIsOurs(ctx, rec, vol, targetPath)
	if err != nil {
		return nil, statusFor(err)
	}
	if ours {
		if err := n.unmountAll(targetPath); err != nil {
			return nil, statusFor(err)
		}
	} else if mounted, err := n.isMountPoint(targetPath); err != nil || mounted {
		if err == nil {
			// Something else is mounted there: not ours to take down.
			err = status.Errorf(codes.FailedPrecondition, "target path %s holds a mount that is not volume %s", targetPath, id)
		}
		return nil, statusFor(err)
	}
	// The CO wants the path gone; only an empty directory or an empty file
	// (what publish creates) is removed.
	if err := removeTarget(targetPath); err != nil {
		return nil, err
	}
	if rec != nil {
		if _, ok := rec.Targets[targetPath]; ok {
			delete(rec.Targets, targetPath)
			if err := n.store.save(rec); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	klog.V(2).InfoS("unpublished volume", "volumeID", id, "target", targetPath)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// targetIsOurs reports whether the volume is what is mounted at path: its
// recorded device, or (the record lost) any device mapped for its image.
func (n *Node) targetIsOurs(ctx context.Context, rec *record, vol volid.Volume, path string) (bool, error) {
	if rec != nil {
		return n.mountedFrom(path, rec.dataDevice(), rec.Cap.Block)
	}
	if mounted, err := n.isMountPoint(path); err != nil || !mounted {
		return false, err
	}
	for _, dev := range n.imageDevices(ctx, vol) {
		for _, block := range []bool{false, true} {
			if ours, err := n.mountedFrom(path, dev, block); err != nil || ours {
				return ours, err
			}
		}
	}
	return false, nil
}

func removeTarget(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return pathStatus("checking the target path", path, err)
	}
	if st.Mode().IsRegular() && st.Size() > 0 {
		return status.Errorf(codes.FailedPrecondition, "target path %s is a file with data; not removing it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return pathStatus("removing the target path", path, err)
	}
	return nil
}
