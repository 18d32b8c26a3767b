package node

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Unfence lifts the fence the controller put on this node when it
// detached a volume the node still had open: the blocklist entries of the
// node's clients, and the record of them (nodereg.Unfencer implements it,
// with the node user).
type Unfence interface {
	Lift(ctx context.Context, volumeID, monHost string) (lifted []string, fenced bool, err error)
	// Fenced tells whether the controller fenced this node for the volume.
	Fenced(ctx context.Context, volumeID string) (bool, error)
}

// fenced tells whether this node's clients of the volume are fenced: a
// mapper may then end a client that waits on writes which can never
// land. Unknown (no registry, or it cannot be read) is false.
func (n *Node) fenced(ctx context.Context, volumeID string) bool {
	if n.unfence == nil {
		return false
	}
	f, err := n.unfence.Fenced(ctx, volumeID)
	return err == nil && f
}

// LiftObserver is told the outcome of each lift (internal/metrics).
type LiftObserver interface {
	FenceLifted(err error)
}

// liftFence lifts this node's fence of the volume, if there is one. The
// caller has unmapped the image: lifting while a mapping is left would let
// its client back in with whatever it still has to write, onto a volume
// that may be attached to another node by now. A failed lift fails
// nothing: the unmap is done, the entries go when they expire, and the
// controller's sweep then drops the record.
func (n *Node) liftFence(ctx context.Context, vol volid.Volume) {
	if n.unfence == nil {
		return
	}
	cl, err := n.clusters.Lookup(vol.ClusterID)
	if err != nil {
		klog.ErrorS(err, "cannot lift a fence of this node: the cluster map no longer has the volume's cluster; its blocklist entries stay until they expire", "volumeID", vol.String())
		return
	}
	lifted, fenced, err := n.unfence.Lift(ctx, vol.String(), cl.MonHost())
	if !fenced && err == nil {
		return
	}
	if n.lifts != nil {
		n.lifts.FenceLifted(err)
	}
	if err != nil {
		klog.ErrorS(err, "lifting the fence of this node's clients failed; their blocklist entries stay until they expire", "volumeID", vol.String(), "lifted", lifted)
		return
	}
	klog.V(1).InfoS("lifted the fence of this node for an unstaged volume", "volumeID", vol.String(), "clients", lifted)
}
