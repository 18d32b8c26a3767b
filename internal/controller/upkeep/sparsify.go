package upkeep

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// sparsifyTimeout bounds one sparsify: it reads every object the image has.
const sparsifyTimeout = 6 * time.Hour

// Sparsify gives the zero-filled blocks of a volume's image back to Ceph
// in the background, unless that is running already, and records the
// request done on the image. volumeID names the volume in the log.
func (k *Keeper) Sparsify(pool rbd.Pool, image, volumeID, request string) {
	k.sparsifies.start(records.PoolImageKey(pool, image), k.env.counted("sparsify", sparsifyTimeout, func(ctx context.Context) {
		start := time.Now()
		if err := k.env.backend.Sparsify(ctx, pool, image); err != nil {
			klog.ErrorS(err, "sparsifying a volume failed; the CO's retry starts it again", "volumeID", volumeID)
			return
		}
		if err := k.env.backend.SetMetadata(ctx, pool, image, records.SparsifiedMetadata(request)); err != nil {
			klog.ErrorS(err, "recording a volume's sparsify", "volumeID", volumeID)
			return
		}
		klog.V(2).InfoS("sparsified volume", "volumeID", volumeID, "request", request, "took", time.Since(start))
	}))
}

// Sparsifying reports whether a sparsify of the image is running.
func (k *Keeper) Sparsifying(pool rbd.Pool, image string) bool {
	return k.sparsifies.busy(records.PoolImageKey(pool, image))
}
