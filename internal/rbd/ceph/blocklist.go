package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Blocklist adds addr to the OSD blocklist for expire ("osd blocklist
// add", the spelling of Ceph 16 Pacific and later, which `mon 'profile
// rbd'` allows for ip:port/nonce addresses).
func (b *Backend) Blocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string, expire time.Duration) error {
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	if expire < time.Second {
		return fmt.Errorf("%w: blocklist expiry %v is below one second", rbd.ErrInvalid, expire)
	}
	// Pacific's monitor takes the expiry as a JSON float only: "3600" is
	// refused as a "bad or missing field", "3600.0" is taken (the schema says
	// CephFloat).
	secs := json.Number(strconv.FormatFloat(expire.Seconds(), 'f', 1, 64))
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "add", "addr": addr, "expire": secs}
	return rbd.RefusedAt(cred, cluster.CapMon, b.withConn(ctx, monHost, cred, "Blocklist", func(conn *rados.Conn) error {
		if err := monCommand(conn, cmd); err != nil {
			return fmt.Errorf("blocklisting client %s: %w", addr, err)
		}
		// Later ops of this connection then carry the map with the entry,
		// and an OSD answers them only once it has that map too.
		if err := conn.WaitForLatestOSDMap(); err != nil {
			return fmt.Errorf("waiting for the OSD map that blocklists %s: %w", addr, classify(err))
		}
		return nil
	}))
}

// Unblocklist removes addr from the OSD blocklist ("osd blocklist rm",
// which `mon 'profile rbd'` does not allow: the user needs
// `allow command "osd blocklist" with blocklistop=rm`).
func (b *Backend) Unblocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string) error {
	if err := rbd.ValidClientAddr(addr); err != nil {
		return err
	}
	cmd := map[string]any{"prefix": "osd blocklist", "blocklistop": "rm", "addr": addr}
	return rbd.RefusedAt(cred, cluster.CapNodeMon, b.withConn(ctx, monHost, cred, "Unblocklist", func(conn *rados.Conn) error {
		// An address that is not blocklisted is a success ("... isn't
		// blocklisted", status 0).
		if err := monCommand(conn, cmd); err != nil {
			return fmt.Errorf("lifting the blocklist entry of client %s: %w", addr, err)
		}
		return nil
	}))
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
