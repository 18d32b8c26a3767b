package node

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// NodeGetVolumeHealth reports what the node knows is wrong with a staged
// volume: INACCESSIBLE when its mapping, its staging mount or (when asked
// about one) its publish mount is gone, its krbd client is blocklisted or
// its filesystem went read-only; DEGRADED when its device lags its image
// or ext4 recorded errors. This is CSI 1.13's successor of the volume
// condition in stats.
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
