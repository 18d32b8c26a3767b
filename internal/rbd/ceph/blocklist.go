package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Watchers lists the clients watching the image's header, each marked
// Own when it is one of this backend's cached connections.
func (b *Backend) Watchers(ctx context.Context, p rbd.Pool, name string) ([]rbd.Watcher, error) {
	var out []rbd.Watcher
	err := b.withIoctx(ctx, p, "Watchers", func(ioctx *rados.IOContext) error {
		// Read-only: a read-write open would add a watch of our own.
		img, err := librbd.OpenImageReadOnly(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		ws, err := img.ListWatchers()
		if err != nil {
			return fmt.Errorf("watchers of image %s/%s: %w", p.Name, name, classify(err))
		}
		// Our addresses are read after the list: a connection made in
		// between cannot have a watch in it, while one made before the
		// list is still cached here (connections go only when idle), so
		// no watch of ours is taken for another client's.
		own, err := b.conns.ownAddrs()
		if err != nil {
			return err
		}
		for _, w := range ws {
			out = append(out, rbd.Watcher{Addr: w.Addr, Own: ownsAny(own, w.Addr)})
		}
		return nil
	})
	return out, err
}

// Blocklist adds addr to the OSD blocklist for expire ("osd blocklist
// add", the spelling of Ceph 16 Pacific and later, which `mon 'profile
// rbd'` allows for ip:port/nonce addresses).
func (b *Backend) Blocklist(ctx context.Context, monHost string, cred config.Credentials, addr string, expire time.Duration) error {
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	// Pacific's monitor takes the expiry as a JSON float only: "3600" is
	// refused as a "bad or missing field", "3600.0" works on every release.
	secs := json.Number(strconv.FormatFloat(expire.Seconds(), 'f', 1, 64))
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "add", "addr": addr, "expire": secs}
	return b.withConn(ctx, monHost, cred, "Blocklist", func(conn *rados.Conn) error {
		if err := monCommand(conn, cmd); err != nil {
			return fmt.Errorf("blocklisting client %s: %w", addr, err)
		}
		// Later ops of this connection then carry the map with the entry,
		// and an OSD answers them only once it has that map too.
		if err := conn.WaitForLatestOSDMap(); err != nil {
			return fmt.Errorf("waiting for the OSD map that blocklists %s: %w", addr, classify(err))
		}
		return nil
	})
}

// Unblocklist removes addr from the OSD blocklist ("osd blocklist rm",
// which `mon 'profile rbd'` does not allow: the user needs
// `allow command "osd blocklist" with blocklistop=rm`).
func (b *Backend) Unblocklist(ctx context.Context, monHost string, cred config.Credentials, addr string) error {
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "rm", "addr": addr}
	return b.withConn(ctx, monHost, cred, "Unblocklist", func(conn *rados.Conn) error {
		// An address that is not blocklisted is a success ("... isn't
		// blocklisted", status 0).
		if err := monCommand(conn, cmd); err != nil {
			return fmt.Errorf("lifting the blocklist entry of client %s: %w", addr, err)
		}
		return nil
	})
}

func monCommand(conn *rados.Conn, cmd map[string]any) error {
	buf, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	if _, status, err := conn.MonCommand(buf); err != nil {
		return fmt.Errorf("%s: %w", status, classify(err))
	}
	return nil
}

// clientAddrs splits what rados_getaddrs or a watcher reports into plain
// ip:port/nonce forms: "127.0.0.1:0/123", or an address vector like
// "[v2:127.0.0.1:0/123,v1:127.0.0.1:0/123]". The type prefixes differ
// between a connection's and a watch's view of one client; the nonce
// and the IP do not.
func clientAddrs(s string) []string {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	var out []string
	for _, a := range strings.Split(s, ",") {
		for _, typ := range []string{"v1:", "v2:", "any:"} {
			a = strings.TrimPrefix(a, typ)
		}
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// IsClient reports whether a watcher's address names the client whose
// rados_getaddrs answer is getaddrs: how Watchers tells its own
// connections' watches apart (e2e/contract pins it on each release).
func IsClient(getaddrs, watcher string) bool {
	own := map[string]bool{}
	for _, a := range clientAddrs(getaddrs) {
		own[a] = true
	}
	return ownsAny(own, watcher)
}

// ownsAny reports whether a watcher's address is among own.
func ownsAny(own map[string]bool, watcher string) bool {
	for _, a := range clientAddrs(watcher) {
		if own[a] {
			return true
		}
	}
	return false
}
