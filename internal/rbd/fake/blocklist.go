package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Watchers lists the image's watchers, this client's own marked Own.
func (c *Ceph) Watchers(ctx context.Context, p rbd.Pool, name string) ([]rbd.Watcher, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return nil, err
	}
	var out []rbd.Watcher
	for _, a := range img.watchers {
		out = append(out, rbd.Watcher{Addr: a, Own: a == c.addr})
	}
	return out, nil
}

// Blocklist records the entry and drops the client's watches, as the
// OSDs do once they have the map with it.
func (c *Ceph) Blocklist(ctx context.Context, _ string, _ config.Credentials, addr string, expire time.Duration) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	if c.blocklistErr != nil {
		return fmt.Errorf("blocklisting client %s: %w", addr, c.blocklistErr)
	}
	c.blocklist[addr] = c.now().Add(expire)
	for _, pl := range c.pools {
		for _, s := range pl.spaces {
			for _, img := range s.images {
				img.watchers = slices.DeleteFunc(img.watchers, func(a string) bool { return a == addr })
			}
		}
	}
	return nil
}

// Unblocklist drops the entry; a missing one is fine.
func (c *Ceph) Unblocklist(ctx context.Context, _ string, _ config.Credentials, addr string) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	delete(c.blocklist, addr)
	return nil
}
