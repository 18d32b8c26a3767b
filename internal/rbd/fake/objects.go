package fake

import (
	"context"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// withSpace runs fn on the pool's RADOS namespace under the lock.
func (c *Ceph) withSpace(ctx context.Context, p rbd.Pool, write bool, fn func(*space)) error {
	if err := c.enter(ctx, p, write); err != nil {
		return err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return err
	}
	fn(s)
	return nil
}

// maxClaim is how much of a claim object the real backend reads back.
const maxClaim = 256

// Claim creates the object holding value unless it exists, and returns
// the value holding it.
func (c *Ceph) Claim(ctx context.Context, p rbd.Pool, obj, value string) (string, error) {
	var holder string
	err := c.withSpace(ctx, p, true, func(s *space) {
		o := s.objects[obj]
		if o == nil {
			o = &object{data: []byte(value), omap: map[string]string{}}
			s.objects[obj] = o
		}
		holder = string(o.data[:min(len(o.data), maxClaim)])
	})
	return holder, err
}

// ClaimHolder reads a claim.
func (c *Ceph) ClaimHolder(ctx context.Context, p rbd.Pool, obj string) (holder string, ok bool, err error) {
	err = c.withSpace(ctx, p, false, func(s *space) {
		if o := s.objects[obj]; o != nil {
			holder, ok = string(o.data[:min(len(o.data), maxClaim)]), true
		}
	})
	return holder, ok, err
}

// Unclaim removes an object.
func (c *Ceph) Unclaim(ctx context.Context, p rbd.Pool, obj string) error {
	return c.withSpace(ctx, p, false, func(s *space) { delete(s.objects, obj) })
}

// SetOmap sets omap keys, creating the object.
func (c *Ceph) SetOmap(ctx context.Context, p rbd.Pool, obj string, kv map[string]string) error {
	return c.withSpace(ctx, p, true, func(s *space) {
		o := s.objects[obj]
		if o == nil {
			o = &object{omap: map[string]string{}}
			s.objects[obj] = o
		}
		for k, v := range kv {
			o.omap[k] = v
		}
	})
}

// GetOmap reads one omap key.
func (c *Ceph) GetOmap(ctx context.Context, p rbd.Pool, obj, key string) (value string, ok bool, err error) {
	err = c.withSpace(ctx, p, false, func(s *space) {
		if o := s.objects[obj]; o != nil {
			value, ok = o.omap[key]
		}
	})
	return value, ok, err
}

// RemoveOmapKeys removes omap keys.
func (c *Ceph) RemoveOmapKeys(ctx context.Context, p rbd.Pool, obj string, keys ...string) error {
	return c.withSpace(ctx, p, false, func(s *space) {
		if o := s.objects[obj]; o != nil {
			for _, k := range keys {
				delete(o.omap, k)
			}
		}
	})
}

// ListOmap reads the omap keys with a prefix.
func (c *Ceph) ListOmap(ctx context.Context, p rbd.Pool, obj, prefix string) (map[string]string, error) {
	out := map[string]string{}
	err := c.withSpace(ctx, p, false, func(s *space) {
		if o := s.objects[obj]; o != nil {
			for k, v := range o.omap {
				if strings.HasPrefix(k, prefix) {
					out[k] = v
				}
			}
		}
	})
	return out, err
}
