package ceph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Network fences: blocklist entries that bar every client of a host or a
// range of hosts, where Blocklist bars one client instance. A single host
// is an address entry with port and nonce 0 ("ip:0/0"), which the OSDs
// match against every instance of that IP on every release; a wider
// prefix is a range entry ("osd blocklist range add"), which the monitors
// of Pacific 16.2.15 take (as e2e/addons shows); older ones may not. Adding either needs only
// `mon 'profile rbd'` (its grant allows blocklistop=add for any address
// of the form x/n, ranges too); removing needs blocklistop=rm
// (cluster.CapNodeMon) or more.

// BlocklistNetwork bars every client in prefix from the cluster's OSDs
// for expire. Repeated, it sets the entry's expiry anew. A range on a
// monitor that does not take ranges is ErrNotSupported: the range is
// read back from the blocklist, since such a monitor would take the
// command's address alone, as one client instance, and bar no one.
func (b *Backend) BlocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix, expire time.Duration) error {
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	prefix = prefix.Masked()
	// Pacific takes the expiry as a JSON float only (see Blocklist).
	secs := json.Number(strconv.FormatFloat(expire.Seconds(), 'f', 1, 64))
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "add", "addr": entryAddr(prefix), "expire": secs}
	host := prefix.IsSingleIP()
	if !host {
		cmd["range"] = "range"
	}
	return rbd.RefusedAt(cred, cluster.CapMon, b.withConn(ctx, monHost, cred, "BlocklistNetwork", func(conn *rados.Conn) error {
		if _, err := monCommandOut(conn, cmd); err != nil {
			if !host && errors.Is(err, rbd.ErrInvalid) {
				// The address is well-formed (a netip.Prefix): what the
				// monitor refuses is the range itself.
				return fmt.Errorf("%w: the monitors refused %s as a range (%w); fence its hosts one by one (/32, /128)", rbd.ErrNotSupported, prefix, err)
			}
			return fmt.Errorf("blocklisting %s: %w", prefix, err)
		}
		if !host {
			_, ranges, err := blocklisted(conn)
			if err != nil {
				return err
			}
			if !contains(ranges, prefix) {
				// Such a monitor took the address alone, as the entry of
				// one client instance (its nonce the prefix length): undo
				// that, and say why the fence did not take.
				_, _ = monCommandOut(conn, map[string]any{"prefix": "osd blocklist", "blocklistop": "rm", "addr": entryAddr(prefix)})
				return fmt.Errorf("%w: the monitors did not record %s as a range (older monitors blocklist single hosts only); fence its hosts one by one (/32, /128)", rbd.ErrNotSupported, prefix)
			}
		}
		// Later ops of this connection then carry the map with the entry.
		if err := conn.WaitForLatestOSDMap(); err != nil {
			return fmt.Errorf("waiting for the OSD map that blocklists %s: %w", prefix, classify(err))
		}
		return nil
	}))
}

// UnblocklistNetwork lifts the entry BlocklistNetwork made for prefix; a
// prefix that is not blocklisted is fine.
func (b *Backend) UnblocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix) error {
	prefix = prefix.Masked()
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "rm", "addr": entryAddr(prefix)}
	if !prefix.IsSingleIP() {
		cmd["range"] = "range"
	}
	return rbd.RefusedAt(cred, cluster.CapNodeMon, b.withConn(ctx, monHost, cred, "UnblocklistNetwork", func(conn *rados.Conn) error {
		// An entry that is not there is a success ("... isn't
		// blocklisted", status 0).
		if _, err := monCommandOut(conn, cmd); err != nil {
			return fmt.Errorf("lifting the blocklist entry of %s: %w", prefix, err)
		}
		return nil
	}))
}

// BlocklistedNetworks lists the network fences in force: the address
// entries of whole hosts (as /32 or /128) and the ranges, sorted. Entries
// of single client instances (force-detach fences, Ceph's own) are not
// network fences and are left out.
func (b *Backend) BlocklistedNetworks(ctx context.Context, monHost string, cred cluster.Credentials) ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := rbd.RefusedAt(cred, cluster.CapMon, b.withConn(ctx, monHost, cred, "BlocklistedNetworks", func(conn *rados.Conn) error {
		hosts, ranges, err := blocklisted(conn)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.instance == 0 {
				out = append(out, h.prefix)
			}
		}
		for _, r := range ranges {
			out = append(out, r.prefix)
		}
		return nil
	}))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out, nil
}

// Blocklisted reports whether the client instance at addr ("ip:port/nonce",
// a kernel client's client_addr) is barred from the OSDs: by an entry of
// its own, one of its host (every instance), or a range holding its IP.
func (b *Backend) Blocklisted(ctx context.Context, monHost string, cred cluster.Credentials, addr string) (bool, error) {
	ip, nonce, ok := parseEntry(addr)
	if !ok {
		return false, fmt.Errorf("%w: %q is not a client address (ip:port/nonce)", rbd.ErrInvalid, addr)
	}
	var barred bool
	err := rbd.RefusedAt(cred, cluster.CapMon, b.withConn(ctx, monHost, cred, "Blocklisted", func(conn *rados.Conn) error {
		hosts, ranges, err := blocklisted(conn)
		barred = bars(hosts, ranges, ip, nonce)
		return err
	}))
	return barred, err
}

// bars reports whether the entries bar the client instance nonce at ip.
func bars(hosts, ranges []entry, ip netip.Addr, nonce uint64) bool {
	for _, h := range hosts {
		if h.prefix.Addr() == ip && (h.instance == 0 || h.instance == nonce) {
			return true
		}
	}
	for _, r := range ranges {
		if r.prefix.Contains(ip) {
			return true
		}
	}
	return false
}

// ClientAddress is this backend's own connection to the cluster at
// monHost as the cluster sees it: the cluster's fsid and the IP its
// monitors and OSDs see this client at.
func (b *Backend) ClientAddress(ctx context.Context, monHost string, cred cluster.Credentials) (fsid string, addr netip.Addr, err error) {
	err = rbd.RefusedAt(cred, cluster.CapMon, b.withConn(ctx, monHost, cred, "ClientAddress", func(conn *rados.Conn) error {
		if fsid, err = conn.GetFSID(); err != nil {
			return fmt.Errorf("reading the cluster's fsid: %w", classify(err))
		}
		addrs, err := conn.GetAddrs()
		if err != nil {
			return fmt.Errorf("reading the address of a Ceph connection: %w", classify(err))
		}
		for _, a := range clientAddrs(addrs) {
			if ip, _, ok := parseEntry(a); ok {
				addr = ip
				return nil
			}
		}
		return fmt.Errorf("the Ceph connection reports no address it can be fenced at (%q)", addrs)
	}))
	return fsid, addr, err
}

// entry is one blocklist entry: a host (a single-IP prefix) with the
// instance's nonce (0: every instance), or a range.
type entry struct {
	prefix   netip.Prefix
	instance uint64
}

// blocklisted reads the blocklist: `osd blocklist ls` answers, in JSON,
// the address entries and then, on monitors that have them, the ranges.
func blocklisted(conn *rados.Conn) (hosts, ranges []entry, err error) {
	out, err := monCommandOut(conn, map[string]any{"prefix": "osd blocklist ls", "format": "json"})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the blocklist: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for i := 0; ; i++ {
		var list []struct {
			Addr  string `json:"addr"`
			Range string `json:"range"`
		}
		if err := dec.Decode(&list); errors.Is(err, io.EOF) {
			return hosts, ranges, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("reading the blocklist %.200q: %w", out, err)
		}
		for _, l := range list {
			if l.Range != "" {
				if ip, bits, ok := parseEntry(l.Range); ok && bits <= uint64(ip.BitLen()) {
					ranges = append(ranges, entry{prefix: netip.PrefixFrom(ip, int(bits)).Masked()})
				}
				continue
			}
			if ip, nonce, ok := parseEntry(l.Addr); ok {
				hosts = append(hosts, entry{prefix: netip.PrefixFrom(ip, ip.BitLen()), instance: nonce})
			}
		}
	}
}

// parseEntry reads Ceph's "ip:port/n" form, where n is an address entry's
// instance nonce (0: every instance) or a range's prefix length.
func parseEntry(s string) (netip.Addr, uint64, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return netip.Addr{}, 0, false
	}
	ap, err := netip.ParseAddrPort(s[:i])
	if err != nil {
		return netip.Addr{}, 0, false
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return netip.Addr{}, 0, false
	}
	return ap.Addr().Unmap(), n, true
}

// entryAddr is prefix in the form the monitor takes: a host as ip:0/0
// (every instance), a range as ip:0/bits.
func entryAddr(p netip.Prefix) string {
	n := 0
	if !p.IsSingleIP() {
		n = p.Bits()
	}
	return netip.AddrPortFrom(p.Addr(), 0).String() + "/" + strconv.Itoa(n)
}

func contains(es []entry, p netip.Prefix) bool {
	for _, e := range es {
		if e.prefix == p {
			return true
		}
	}
	return false
}

func monCommandOut(conn *rados.Conn, cmd map[string]any) ([]byte, error) {
	buf, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	out, status, err := conn.MonCommand(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", status, classify(err))
	}
	return out, nil
}
