package upkeep

import (
	"context"

	"k8s.io/klog/v2"
)

// dropExpiredFences removes the fence records whose blocklist entries Ceph
// has dropped by itself; the periodic sweep calls it. A node that never
// came back to unstage the volume leaves such records.
func (e *env) dropExpiredFences(ctx context.Context) {
	n, err := e.o.Fences.DropExpiredFences(ctx)
	if err != nil {
		klog.ErrorS(err, "dropping expired fence records from the node registry; the next sweep tries again")
		return
	}
	for range n {
		e.o.Observer.Reclaimed(reclaimedFence)
	}
	if n > 0 {
		klog.V(2).InfoS("dropped expired fence records", "count", n)
	}
}
