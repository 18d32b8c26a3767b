package upkeep

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// flattenTimeout bounds one background flatten; a large image on a slow
// cluster may need long, but never forever.
const flattenTimeout = 6 * time.Hour

// Flatten copies a deep clone's data out of its parents in the
// background, off the request path, unless that is running already. When
// it is done the parent may be left without dependents and is reclaimed.
func (k *Keeper) Flatten(pool rbd.Pool, image string, parent *rbd.Parent) {
	k.flattens.start(records.PoolImageKey(pool, image), k.env.counted("flatten", flattenTimeout, func(ctx context.Context) {
		start := time.Now()
		if err := k.env.backend.Flatten(ctx, pool, image); err != nil {
			klog.ErrorS(err, "flattening a deep clone failed; the next clone from this chain retries", "pool", pool.Name, "image", image)
			return
		}
		if err := k.env.backend.SetMetadata(ctx, pool, image, records.DepthMetadata(0)); err != nil {
			klog.ErrorS(err, "recording a flattened clone's depth", "pool", pool.Name, "image", image)
		}
		klog.V(2).InfoS("flattened deep clone", "pool", pool.Name, "image", image, "took", time.Since(start))
		if parent != nil {
			if err := k.env.reclaim(ctx, pool.WithName(parent.Pool), parent.ImageID); err != nil {
				klog.ErrorS(err, "reclaiming a flattened clone's parent", "pool", parent.Pool, "imageID", parent.ImageID)
			}
		}
	}))
}
