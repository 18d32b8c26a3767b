package node

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// stagedRecord returns the record of a staged volume, or NotFound.
func (n *Node) stagedRecord(id string) (*record, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	if _, err := decodeID(id); err != nil {
		return nil, err
	}
	rec, err := n.store.load(id)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil || !rec.Staged {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	return rec, nil
}

// recordAt returns the record of a volume that is staged or published at
// path, or NotFound. It takes no lock: stats and health only read, and
// records are replaced atomically.
func (n *Node) recordAt(id, path string) (*record, error) {
	if id != "" && path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is missing")
	}
	rec, err := n.stagedRecord(id)
	if err != nil {
		return nil, err
	}
	if _, published := rec.Targets[path]; path != rec.StagingPath && !published {
		return nil, status.Errorf(codes.NotFound, "volume %s is neither staged nor published at %.200q", id, path)
	}
	return rec, nil
}

// NodeGetVolumeStats reports bytes and inodes of a mounted filesystem, or
// the size of a raw block volume.
func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	path := req.GetVolumePath()
	rec, err := n.recordAt(req.GetVolumeId(), path)
	if err != nil {
		return nil, err
	}
	block := rec.Cap.Block
	if block && path == rec.StagingPath {
		// Nothing is mounted at a raw block volume's staging path.
		size, err := blockdev.Size(rec.dataDevice())
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %s: %s", rec.VolumeID, deviceGone(rec.dataDevice(), err))
		}
		return blockUsage(size), nil
	}
	ours, err := n.mountedFrom(path, rec.dataDevice(), block)
	if err != nil {
		return nil, statusFor(err)
	}
	if !ours {
		return nil, status.Errorf(codes.NotFound, "volume %s is not mounted at %s (any more)", rec.VolumeID, path)
	}
	if block {
		size, err := blockdev.Size(path)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: reading the size of the block device published at %s: %s", rec.VolumeID, path, deviceGone(rec.dataDevice(), err))
		}
		return blockUsage(size), nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: statfs of its filesystem at %s (device %s): %v; the node's kernel log (dmesg) tells whether the filesystem or the device failed (%s)",
			rec.VolumeID, path, rec.dataDevice(), err, ioErrorsDoc)
	}
	bsize := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     int64(st.Blocks) * bsize,
			Available: int64(st.Bavail) * bsize,
			Used:      int64(st.Blocks-st.Bfree) * bsize,
		},
		{
			Unit:      csi.VolumeUsage_INODES,
			Total:     int64(st.Files),
			Available: int64(st.Ffree),
			Used:      int64(st.Files - st.Ffree),
		},
	}}, nil
}

// ioErrorsDoc is the troubleshooting section on failed and hanging volumes.
const ioErrorsDoc = "docs/operations.md#io-errors-or-a-volume-that-hangs"

// deviceGone says that a volume's device cannot be opened, and what to
// check: a mapping taken away outside the driver, or one lost to a node
// plugin restart (fuse) or a reboot.
func deviceGone(device string, err error) string {
	return fmt.Sprintf("its device %s cannot be opened (%v): was the image unmapped outside the driver (rbd device unmap), or the node plugin restarted (fuse mappings end with it) or the node rebooted? "+
		"Unstaging and staging again (restarting the pod) maps it anew (%s)", device, err, ioErrorsDoc)
}

func blockUsage(size int64) *csi.NodeGetVolumeStatsResponse {
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}
}

// NodeGetVolumeHealth reports a staged volume INACCESSIBLE when its
// mapping, its staging mount or (when asked about one) its publish mount
// is gone. This is CSI 1.13's successor of the volume condition in stats.
func (n *Node) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	rec, err := n.stagedRecord(id)
	if err != nil {
		return nil, err
	}
	health := &csi.VolumeHealth{VolumeId: id}
	bad := func(reason, msg string) {
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: reason, Message: msg,
		})
	}
	if m, err := n.mapperFor(rec.Mounter); err == nil {
		list, err := m.List(ctx)
		mp, ok := mapper.Find(list, rec.Image)
		if err == nil && (!ok || mp.Device != rec.Device) {
			bad("MappingLost", "the image is no longer mapped to "+rec.Device)
		} else if err == nil && n.clientBlocklisted(ctx, rec, mp.ClientAddr) {
			bad("ClientBlocklisted", "this node's kernel client "+mp.ClientAddr+" that maps the volume is blocklisted (fenced, as when the volume was force-detached from this node): "+
				"its I/O fails, and the driver does not map it anew behind the fence; restart the pod to unstage the volume and stage it again once the fence is lifted ("+healthDoc+")")
		}
	}
	if !rec.Cap.Block {
		ours, err := n.mountedFrom(rec.StagingPath, rec.dataDevice(), false)
		if err == nil && !ours {
			bad("StagingMountLost", "nothing of the volume is mounted at the staging path "+rec.StagingPath)
		}
		if err == nil && ours {
			n.fsHealth(health, rec)
		}
	}
	n.deviceSizeHealth(ctx, health, rec)
	if p := req.GetVolumePublishPath(); p != "" {
		if _, published := rec.Targets[p]; published {
			if ours, err := n.mountedFrom(p, rec.dataDevice(), rec.Cap.Block); err == nil && !ours {
				bad("PublishMountLost", "nothing of the volume is mounted at "+p)
			}
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

// fsHealth adds the conditions of a staged filesystem: read-only although
// staged for writing (INACCESSIBLE: every write fails), errors recorded
// by ext4 (DEGRADED: it still serves, but its metadata was found damaged).
func (n *Node) fsHealth(health *csi.VolumeHealth, rec *record) {
	c, err := stagedFSCondition(rec.StagingPath, rec.dataDevice())
	if err != nil {
		klog.V(2).InfoS("reading the staged filesystem's condition", "volumeID", rec.VolumeID, "err", err)
		return
	}
	if c.readOnly && rec.Cap.writable() {
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "FilesystemReadOnly",
			Message: "the volume's filesystem was staged for writing and is read-only now: the kernel shuts writes off after I/O or metadata errors (see the node's kernel log, dmesg); " +
				"restart the pod to unstage it, and check it (fsck) if errors were recorded (" + healthDoc + ")",
		})
	}
	if c.errors > 0 {
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_DEGRADED, Reason: "FilesystemErrors",
			Message: fmt.Sprintf("ext4 recorded %d errors in the volume's filesystem (the first in %s): unstage the volume and run e2fsck on its image before the damage spreads (%s)",
				c.errors, c.first, healthDoc),
		})
	}
}

// healthDoc is the operations guide's section on what each health reason
// means and how to repair it.
const healthDoc = "docs/operations.md#volume-health"

// deviceSizeHealth reports a mapped device smaller than its image: an
// expansion the node has not caught up with. Between the controller's
// expansion and the kubelet's NodeExpandVolume this is expected (krbd and
// rbd-nbd refresh by themselves, a fuse mapping's loop device only then);
// if it lasts, the node's refresh failed. It asks Ceph as the node's own
// user, so it needs --node-secret-dir; anything it cannot read reports
// nothing.
func (n *Node) deviceSizeHealth(ctx context.Context, health *csi.VolumeHealth, rec *record) {
	if n.images == nil || n.cred == nil || n.clusters == nil || rec.Device == "" {
		return
	}
	cl, err := n.clusters.Lookup(rec.Image.ClusterID)
	if err != nil {
		return
	}
	info, err := n.images.Stat(ctx, rbd.NewPool(cl, *n.cred, rec.Image.Pool), rec.Image.Name)
	if err != nil {
		klog.V(2).InfoS("reading the image size for the volume's health", "volumeID", rec.VolumeID, "err", err)
		return
	}
	size, err := blockdev.Size(rec.Device)
	if err != nil || size < 0 || uint64(size) >= info.Size {
		return
	}
	health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
		Status: csi.VolumeHealthErrorType_DEGRADED, Reason: "DeviceSmallerThanImage",
		Message: fmt.Sprintf("the image was expanded to %d bytes and its device %s on this node has %d: while an expansion is under way the kubelet's NodeExpandVolume refreshes it; if this lasts, restart the pod to stage the volume anew (%s)",
			info.Size, rec.Device, size, healthDoc),
	})
}

// clientBlocklisted asks the cluster, as the node's own user, whether a
// krbd mapping's kernel client is blocklisted; it cannot tell for the
// other mappers (no address), without the node's user, or when the
// cluster does not answer, and then says no.
func (n *Node) clientBlocklisted(ctx context.Context, rec *record, addr string) bool {
	if addr == "" || n.blocklist == nil || n.cred == nil || n.clusters == nil {
		return false
	}
	cl, err := n.clusters.Lookup(rec.Image.ClusterID)
	if err != nil {
		return false
	}
	barred, err := n.blocklist.Blocklisted(ctx, cl.MonHost(), *n.cred, addr)
	if err != nil {
		klog.V(2).InfoS("reading the blocklist for the volume's health", "volumeID", rec.VolumeID, "err", err)
		return false
	}
	return barred
}
