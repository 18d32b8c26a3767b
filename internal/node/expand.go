package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
)

// refreshTimeout bounds the wait for the device to show the new size.
const refreshTimeout = 60 * time.Second

// NodeExpandVolume makes the device show the image's new size and grows
// the filesystem on it, online. A raw block volume only needs the first.
func (n *Node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := capability(c); err != nil {
			return nil, err
		}
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 || (limit > 0 && required > limit) {
		return nil, status.Errorf(codes.InvalidArgument, "capacity range (required %d, limit %d) is not valid", required, limit)
	}
	rec, err := n.recordAt(req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	release, err := n.lock(rec.VolumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	m, err := n.mapperFor(rec.Mounter)
	if err != nil {
		return nil, err
	}
	// The new size reaches the device within seconds; a size that never
	// comes (the controller has not grown the image) must not hang the call.
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	size, err := m.Refresh(rctx, rec.Device, required)
	if err != nil {
		return nil, statusFor(fmt.Errorf("volume %s: refreshing the size of %s: %w", rec.VolumeID, rec.Device, err))
	}
	if rec.Crypt != "" {
		if size, err = n.resizeCrypt(ctx, rec); err != nil {
			return nil, statusFor(err)
		}
	}
	if rec.Cap.Block {
		return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
	}
	ours, err := n.mountedFrom(rec.StagingPath, rec.dataDevice(), false)
	if err != nil {
		return nil, statusFor(err)
	}
	if !ours {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not mounted at its staging path %s; stage it again before expanding", rec.VolumeID, rec.StagingPath)
	}
	name, args, err := growArgs(rec.Cap.FsType, rec.dataDevice(), rec.StagingPath)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Both tools are idempotent: a filesystem that fills its device
	// already is left as it is.
	err = n.growKeepingZeros(ctx, rec.StagingPath, func() error {
		_, err := n.run.Run(ctx, name, args...)
		return err
	})
	if err != nil {
		if strings.Contains(err.Error(), "Permission denied to resize filesystem") {
			// The kernel's online ext4 resize wants CAP_SYS_RESOURCE.
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s: online ext4 resize needs CAP_SYS_RESOURCE, which the plugin lacks (run it privileged); the filesystem will be grown when the volume is next staged: %v", rec.VolumeID, err)
		}
		return nil, statusFor(fmt.Errorf("volume %s: growing its %s (%s %s): %w", rec.VolumeID, rec.Cap.FsType, name, strings.Join(args, " "), err))
	}
	klog.V(2).InfoS("expanded volume on the node", "volumeID", rec.VolumeID, "device", rec.dataDevice(), "size", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// resizeCrypt grows an encrypted volume's dm-crypt device to fill the
// mapped one (it was opened without the kernel keyring, so no key is
// needed) and returns its new size: the volume's less the LUKS header.
func (n *Node) resizeCrypt(ctx context.Context, rec *record) (int64, error) {
	if n.crypt == nil {
		return 0, fmt.Errorf("volume %s is encrypted, and this node plugin has no cryptsetup", rec.VolumeID)
	}
	if err := n.crypt.Resize(ctx, rec.Crypt); err != nil {
		return 0, fmt.Errorf("volume %s: growing its dm-crypt device %s: %w", rec.VolumeID, rec.Crypt, err)
	}
	size, err := blockdev.Size(rec.dataDevice())
	if err != nil {
		return 0, fmt.Errorf("volume %s: %s", rec.VolumeID, deviceGone(rec.dataDevice(), err))
	}
	return size, nil
}

// growKeepingZeros runs grow with the staging mount's noinit_itable lifted,
// if it has it (an ext4 volume created empty, stage.go). Under
// noinit_itable an online ext4 grow zeroes the inode tables of the groups
// it adds at once, writing zeros where the device has no WRITE_ZEROES
// (rbd-nbd, rbd-fuse: 2 MiB per 128 MiB added); otherwise it leaves them
// to lazy init, which mounts with noinit_itable never start. On an image
// created empty those tables read as zeros already.
func (n *Node) growKeepingZeros(ctx context.Context, staging string, grow func() error) error {
	if !slices.Contains(superOptions(staging), "noinit_itable") {
		return grow()
	}
	// runs: mount (remount: the same filesystem with another ext4 option)
	if _, err := n.run.Run(ctx, "mount", "-o", "remount,init_itable", staging); err != nil {
		return fmt.Errorf("lifting noinit_itable for the grow: %w", err)
	}
	defer func() {
		_, err := n.run.Run(context.WithoutCancel(ctx), "mount", "-o", "remount,noinit_itable", staging)
		logUndo("remount "+staging+" with noinit_itable", err)
	}()
	return grow()
}

// superOptions are the filesystem options of the mount at path (the last
// one mounted there); none if it cannot tell.
func superOptions(path string) []string {
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var opts []string
	for _, m := range infos {
		if m.MountPoint == path {
			opts = m.SuperOptions
		}
	}
	return opts
}
