package controller

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

// flattener copies deep clones' data out of their parents in the
// background, one flatten per image at a time, off the request path.
type flattener struct {
	c     *Controller
	tasks *background
}

func newFlattener(c *Controller) *flattener {
	return &flattener{c: c, tasks: newBackground()}
}

func (f *flattener) stop() { f.tasks.stop() }

// busy reports whether a flatten of the image is running.
func (f *flattener) busy(pool rbd.Pool, image string) bool {
	return f.tasks.busy(records.PoolImageKey(pool, image))
}

// start flattens the image unless that is running already. When it is
// done the parent may be left without dependents and is reclaimed.
func (f *flattener) start(pool rbd.Pool, image string, parent *rbd.Parent) {
	f.tasks.start(records.PoolImageKey(pool, image), func(ctx context.Context) {
		f.c.opts.Upkeep.BackgroundTasks("flatten", 1)
		defer f.c.opts.Upkeep.BackgroundTasks("flatten", -1)
		ctx, cancel := context.WithTimeout(ctx, flattenTimeout)
		defer cancel()
		start := time.Now()
		if err := f.c.backend.Flatten(ctx, pool, image); err != nil {
			klog.ErrorS(err, "flattening a deep clone failed; the next clone from this chain retries", "pool", pool.Name, "image", image)
			return
		}
		if err := f.c.backend.SetMetadata(ctx, pool, image, records.DepthMetadata(0)); err != nil {
			klog.ErrorS(err, "recording a flattened clone's depth", "pool", pool.Name, "image", image)
		}
		klog.V(2).InfoS("flattened deep clone", "pool", pool.Name, "image", image, "took", time.Since(start))
		if parent != nil {
			if err := f.c.reclaim(ctx, parentPool(pool, parent), parent.ImageID); err != nil {
				klog.ErrorS(err, "reclaiming a flattened clone's parent", "pool", parent.Pool, "imageID", parent.ImageID)
			}
		}
	})
}
