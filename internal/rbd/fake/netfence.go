package fake

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Network fences share the blocklist with the instance entries of
// Blocklist, under the key the monitor would list them by: "ip:0/0" for
// a host, "range ip:0/bits" for a range (Blocklisted shows both).

// FenceID is the fake cluster's fsid, which ClientAddress reports.
const FenceID = "00000000-0000-4000-8000-00000000fa4e"

// BlocklistNetwork records the fence of prefix.
func (c *Ceph) BlocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix, expire time.Duration) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return err
	}
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	if c.blocklistErr != nil {
		return rbd.RefusedAt(cred, cluster.CapMon, fmt.Errorf("blocklisting %s: %w", prefix, c.blocklistErr))
	}
	c.blocklist[fenceKey(prefix)] = c.now().Add(expire)
	return nil
}

// UnblocklistNetwork drops the fence of prefix; a missing one is fine.
func (c *Ceph) UnblocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return err
	}
	delete(c.blocklist, fenceKey(prefix))
	return nil
}

// BlocklistedNetworks lists the fences that have not expired, sorted.
func (c *Ceph) BlocklistedNetworks(ctx context.Context, monHost string, cred cluster.Credentials) ([]netip.Prefix, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for k, until := range c.blocklist {
		if p, ok := fenceOf(k); ok && until.After(c.now()) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out, nil
}

// ClientAddress reports the fake's fsid and this client's IP.
func (c *Ceph) ClientAddress(ctx context.Context, monHost string, cred cluster.Credentials) (string, netip.Addr, error) {
	if err := c.begin(ctx); err != nil {
		return "", netip.Addr{}, err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return "", netip.Addr{}, err
	}
	ap, err := netip.ParseAddrPort(c.addr[:strings.LastIndexByte(c.addr, '/')])
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("fake: client address %q: %w", c.addr, err)
	}
	return FenceID, ap.Addr(), nil
}

func fenceKey(p netip.Prefix) string {
	p = p.Masked()
	if p.IsSingleIP() {
		return netip.AddrPortFrom(p.Addr(), 0).String() + "/0"
	}
	return "range " + netip.AddrPortFrom(p.Addr(), 0).String() + "/" + strconv.Itoa(p.Bits())
}

func fenceOf(key string) (netip.Prefix, bool) {
	rest, isRange := strings.CutPrefix(key, "range ")
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return netip.Prefix{}, false
	}
	ap, err := netip.ParseAddrPort(rest[:i])
	if err != nil {
		return netip.Prefix{}, false
	}
	switch n, _ := strconv.Atoi(rest[i+1:]); {
	case isRange:
		return netip.PrefixFrom(ap.Addr(), n), true
	case n == 0: // a host; other nonces are single instances
		return netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen()), true
	}
	return netip.Prefix{}, false
}
