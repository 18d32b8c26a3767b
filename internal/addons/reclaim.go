package addons

import (
	"context"
	"math"
	"strings"

	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
)

// Reclaim is the csi-addons ReclaimSpace controller service: the offline
// half of a ReclaimSpaceJob, which the csi-addons controller calls for
// every volume, attached or not, beside the node's fstrim where a node
// has it staged.
type Reclaim struct {
	reclaimspace.UnimplementedReclaimSpaceControllerServer
	volumes
}

// ControllerReclaimSpace gives the zero-filled blocks of a detached
// volume back to Ceph (RBD sparsify) and reports what its image held of
// its own before and after (whole objects, as `rbd du` counts them).
//
// An attached volume, or one a client has open, is not sparsified: a
// sparsify takes the image's exclusive lock from the node at every
// object, and the node's own reclaim (fstrim) is what frees a mounted
// filesystem's blocks. The call then succeeds with the usage unchanged,
// since failing it would fail the node's half of the same job. A copy
// that is not primary (a mirrored secondary) is refused: a sparsify
// writes, and only rbd-mirror writes to such a copy.
//
// The parameters are the volume's attributes (the sidecar passes them as
// they are), which this call needs none of; the secrets are the
// volume's node-stage Secret, or none, when the driver's own credentials
// serve. The sparsify runs within the call's deadline, under the
// volume's lock.
func (r *Reclaim) ControllerReclaimSpace(ctx context.Context, req *reclaimspace.ControllerReclaimSpaceRequest) (*reclaimspace.ControllerReclaimSpaceResponse, error) {
	resp := &reclaimspace.ControllerReclaimSpaceResponse{}
	c := call{name: "ControllerReclaimSpace", id: req.GetVolumeId(), secrets: req.GetSecrets()}
	err := r.withVolume(ctx, c, func(v volume, _ classParams) error {
		if m := v.fam.Mirror; m != nil && !m.Primary {
			return status.Errorf(codes.FailedPrecondition, "volume %s is the non-primary copy of a mirrored image: a sparsify writes to it, and only rbd-mirror may; reclaim space at the primary, or after promoting this copy", v.id)
		}
		pre, err := r.usage(ctx, v)
		if err != nil {
			return err
		}
		resp.PreUsage = pre
		if nodes := attach.Nodes(v.fam.Metadata, v.fam.ID); len(nodes) > 0 || v.fam.Watchers > 0 {
			klog.V(2).InfoS("not sparsifying a volume in use; the node's reclaim trims it", "volumeID", v.id, "attachedTo", strings.Join(nodes, ","), "watchers", v.fam.Watchers)
			resp.PostUsage = pre
			return nil
		}
		if err := r.o.Backend.Sparsify(ctx, v.pool, v.image()); err != nil {
			return cephStatus(err)
		}
		post, err := r.usage(ctx, v)
		if err != nil {
			return err
		}
		resp.PostUsage = post
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// usage is what the volume's image holds of its own.
func (r *Reclaim) usage(ctx context.Context, v volume) (*reclaimspace.StorageConsumption, error) {
	used, err := r.o.Backend.UsedBytes(ctx, v.pool, v.image())
	if err != nil {
		return nil, cephStatus(err)
	}
	return &reclaimspace.StorageConsumption{UsageBytes: int64(min(used, math.MaxInt64))}, nil
}

// NodeReclaim is the csi-addons ReclaimSpace node service: the online
// half of a ReclaimSpaceJob, on the node that has the volume staged.
type NodeReclaim struct {
	reclaimspace.UnimplementedReclaimSpaceNodeServer

	trim NodeTrim
}

// NodeReclaimSpace trims the volume's staged filesystem (fstrim), so the
// blocks of deleted files go back to Ceph. The volume is found by its ID
// in the node's own state; a staging_target_path that is given must be
// where it is staged. A raw block volume is left alone, as the csi-addons
// spec allows: what its blocks hold is the pod's, and only discarding
// them (which destroys the data) would free space. The response carries
// no usage: the node has no credentials of its own to ask Ceph with, and
// the controller's half reports it.
func (n *NodeReclaim) NodeReclaimSpace(ctx context.Context, req *reclaimspace.NodeReclaimSpaceRequest) (*reclaimspace.NodeReclaimSpaceResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetVolumePath() == "" && req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	if err := n.trim(ctx, req.GetVolumeId(), req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &reclaimspace.NodeReclaimSpaceResponse{}, nil
}
