package fake

import (
	"context"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// UsedBytes is the head's own data, byte-exact (Ceph counts whole
// objects; the fake has none).
func (c *Ceph) UsedBytes(ctx context.Context, p rbd.Pool, name string) (uint64, error) {
	var used uint64
	err := c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		for _, s := range img.data {
			if !s.zero {
				used += s.end - s.off
			}
		}
		return nil
	})
	return used, err
}
