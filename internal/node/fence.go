package node

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Fence reads a volume image's metadata, where the controller records
// attachments (internal/rbd implements it).
type Fence interface {
	Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error)
}

// checkAttached refuses to map a single-node volume on a node that does not
// hold its attachment in Ceph, so a stale pod on the node a volume moved
// away from cannot write to it any more.
func (n *Node) checkAttached(ctx context.Context, vol volid.Volume, cluster config.Cluster, cred config.Credentials, mode string) error {
	if n.fence == nil {
		return nil
	}
	m, ok := csi.VolumeCapability_AccessMode_Mode_value[mode]
	if !ok || !attach.SingleNode(csi.VolumeCapability_AccessMode_Mode(m)) {
		return nil
	}
	info, err := n.fence.Stat(ctx, rbd.NewPool(cluster, cred, vol.Pool), vol.Image)
	switch {
	case errors.Is(err, rbd.ErrNotFound), errors.Is(err, rbd.ErrPoolNotFound):
		return status.Errorf(codes.NotFound, "volume %s does not exist", vol)
	case errors.Is(err, rbd.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.Unavailable, "reading the attachments of volume %s: %v", vol, err)
	case err != nil:
		return status.Errorf(codes.Internal, "reading the attachments of volume %s: %v", vol, err)
	}
	if _, ok := attach.Records(info.Metadata)[n.id]; !ok {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not attached to node %s (attached to: %v); refusing to map it here", vol, n.id, attach.Nodes(info.Metadata))
	}
	return nil
}
