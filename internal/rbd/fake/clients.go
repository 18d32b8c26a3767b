package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Clients lists the image's watchers and its lock holder, once each,
// this client's own marked Own.
func (c *Ceph) Clients(ctx context.Context, p rbd.Pool, name string) ([]rbd.Client, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return nil, err
	}
	var out []rbd.Client
	for _, a := range img.watchers {
		if !slices.ContainsFunc(out, func(cl rbd.Client) bool { return cl.Addr == a }) {
			out = append(out, rbd.Client{Addr: a, Own: a == c.addr, Watch: true, Lock: a == img.locker})
		}
	}
	if img.locker != "" && !slices.Contains(img.watchers, img.locker) {
		out = append(out, rbd.Client{Addr: img.locker, Own: img.locker == c.addr, Lock: true})
	}
	return out, nil
}

// BreakLock drops the exclusive lock if addr holds it.
func (c *Ceph) BreakLock(ctx context.Context, p rbd.Pool, name, addr string) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return err
	}
	if img.locker == addr {
		img.locker = ""
	}
	return nil
}

// Blocklist records the entry and drops the client's watches (not its
// lock), as the OSDs do once they have the map with it.
func (c *Ceph) Blocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string, expire time.Duration) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return err
	}
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	if c.blocklistErr != nil {
		return rbd.RefusedAt(cred, cluster.CapMon, fmt.Errorf("blocklisting client %s: %w", addr, c.blocklistErr))
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
func (c *Ceph) Unblocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return err
	}
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	delete(c.blocklist, addr)
	return nil
}
