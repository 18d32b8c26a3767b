package node

import (
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cgroup"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// podUIDKey is the volume-context key kubelet adds for the CSIDriver's
// podInfoOnMount.
const podUIDKey = "csi.storage.k8s.io/pod.uid"

// capIO sets a krbd volume's QoS limits, which the controller hands over
// in the publish context, as the pod cgroup's io.max line for the device;
// nbd and fuse run librbd, which enforces them itself. Every publish
// writes the line, limits or none, so a volume published again after its
// class changed gets the new limits. A limit is never a reason to fail a
// publish: what goes wrong is logged.
func (n *Node) capIO(rec *record, req *csi.NodePublishVolumeRequest) {
	if rec.Mounter != mapper.KRBD || n.cgroupRoot == "" {
		return
	}
	limits, err := config.ParseKernelLimits(req.GetPublishContext()[config.PublishContextQoS])
	if err != nil {
		klog.ErrorS(err, "QoS limits not set", "volumeID", rec.VolumeID)
		return
	}
	logLevel := klog.Level(4)
	if limits != (config.KernelLimits{}) {
		logLevel = 0
	}
	uid := req.GetVolumeContext()[podUIDKey]
	if uid == "" {
		klog.V(logLevel).InfoS("QoS limits not set: no pod UID in the volume context (the CSIDriver needs podInfoOnMount: true)", "volumeID", rec.VolumeID)
		return
	}
	dir, err := cgroup.PodDir(n.cgroupRoot, uid)
	if err != nil {
		if errors.Is(err, cgroup.ErrNoV2) || errors.Is(err, cgroup.ErrNoPod) {
			klog.V(logLevel).InfoS("QoS limits not set", "volumeID", rec.VolumeID, "reason", err.Error())
		} else {
			klog.ErrorS(err, "QoS limits not set", "volumeID", rec.VolumeID)
		}
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(rec.Device, &st); err != nil {
		klog.ErrorS(err, "QoS limits not set: the device is gone", "volumeID", rec.VolumeID, "device", rec.Device)
		return
	}
	l := cgroup.Limits{ReadBps: limits.ReadBps, WriteBps: limits.WriteBps, ReadIops: limits.ReadIops, WriteIops: limits.WriteIops}
	if err := cgroup.SetIOMax(dir, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), l); err != nil {
		klog.ErrorS(err, "QoS limits not set", "volumeID", rec.VolumeID)
		return
	}
	klog.V(2).InfoS("set the pod's I/O limits on the volume's device", "volumeID", rec.VolumeID, "cgroup", dir, "limits", limits.String())
}
