package ceph

import (
	"context"
	"fmt"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// UsedBytes is how many bytes of the image's head hold objects of its
// own, counted as `rbd du` counts them (whole objects, from the object
// map where the image has one): data a clone reads from its parent is
// the parent's, and not counted. Opened read-only, it adds no watch.
func (b *Backend) UsedBytes(ctx context.Context, p rbd.Pool, name string) (uint64, error) {
	var used uint64
	err := b.withIoctx(ctx, p, "UsedBytes", func(ioctx *rados.IOContext) error {
		img, err := openRO(ioctx, name, "")
		if err != nil {
			return err
		}
		defer img.Close()
		size, err := img.GetSize()
		if err != nil {
			return fmt.Errorf("size of image %s/%s: %w", p.Name, name, classify(err))
		}
		err = img.DiffIterate(librbd.DiffIterateConfig{
			Offset: 0, Length: size, IncludeParent: librbd.ExcludeParent, WholeObject: librbd.EnableWholeObject,
			Callback: func(_, length uint64, exists int, _ interface{}) int {
				if ctx.Err() != nil {
					return -1 // the caller is gone: stop the walk
				}
				if exists != 0 {
					used += length
				}
				return 0
			},
		})
		if err != nil {
			return fmt.Errorf("usage of image %s/%s: %w", p.Name, name, classify(err))
		}
		return nil
	})
	return used, err
}
