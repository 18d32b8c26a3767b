package node

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
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
func (n *Node) checkAttached(ctx context.Context, vol volid.Volume, cl cluster.Cluster, cred cluster.Credentials, mode string) error {
	if n.fence == nil {
		return nil
	}
	m, ok := csi.VolumeCapability_AccessMode_Mode_value[mode]
	if !ok || !attach.SingleNode(csi.VolumeCapability_AccessMode_Mode(m)) {
		return nil
	}
	info, err := n.fence.Stat(ctx, rbd.NewPool(cl, cred, vol.Pool), vol.Image)
	if err != nil {
		return readStatus(vol, "the attachments", err)
	}
	if _, ok := attach.Records(info.Metadata, info.ID)[n.id]; !ok {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not attached to node %s (attached to: %v); refusing to map it here", vol, n.id, attach.Nodes(info.Metadata, info.ID))
	}
	return nil
}

// readCodes are the codes of a failed read of the image's metadata. A
// refusal is PermissionDenied, as the controller answers one; its message
// names the user and the caps (rbd.RefusedOn).
func readCodes() grpcerr.Table {
	return grpcerr.Table{
		{Err: rbd.ErrNotFound, Code: codes.NotFound},
		{Err: rbd.ErrPoolNotFound, Code: codes.NotFound},
		{Err: rbd.ErrUnavailable, Code: codes.Unavailable},
		{Err: rbd.ErrPermission, Code: codes.PermissionDenied},
	}
}

// readStatus answers a failed read of what (the attachments, the key
// record) in the volume image's metadata. A timeout is Unavailable: it is
// Ceph that did not answer within the node's bound, and the CO retries
// the stage either way.
func readStatus(vol volid.Volume, what string, err error) error {
	code := readCodes().Code(err)
	switch code {
	case codes.NotFound:
		return status.Errorf(codes.NotFound, "volume %s does not exist", vol)
	case codes.DeadlineExceeded:
		code = codes.Unavailable
	}
	return status.Errorf(code, "reading %s of volume %s: %v", what, vol, err)
}
