package rbdtest

import (
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A client with the image open is listed by its address, not as one of
// the backend's own. Blocklisting it drops its watch at once (for the
// backend's next call), an entry the CSI user may add, and a repeat is
// fine; lifting it, also twice, takes it off the blocklist. A malformed
// address is refused before it reaches the monitor.
func testBlocklist(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.create(name, mib, nil)
	if ws, err := b.Watchers(ctx, p, name); err != nil || len(ws) != 0 {
		t.Fatalf("Watchers of an image nobody opened: %v, %v", ws, err)
	}
	_, err := b.Watchers(ctx, p, s.name("missing"))
	s.wantErr(err, "Watchers of a missing image", rbd.ErrNotFound)

	unwatch := s.Watch(t, p, name)
	defer unwatch()
	ws, err := b.Watchers(ctx, p, name)
	s.must(err, "Watchers")
	if len(ws) != 1 || ws[0].Own || rbd.ValidClientAddr(ws[0].Addr) != nil {
		t.Fatalf("Watchers with another client = %+v, want one, not our own, at ip:port/nonce", ws)
	}
	addr := ws[0].Addr

	s.wantErr(b.Blocklist(ctx, p.MonHost, p.Cred, "127.0.0.1", time.Minute), "Blocklist of a whole host", rbd.ErrInvalid)
	s.wantErr(b.Blocklist(ctx, p.MonHost, p.Cred, addr, 0), "Blocklist without an expiry", rbd.ErrInvalid)
	s.must(b.Blocklist(ctx, p.MonHost, p.Cred, addr, time.Minute), "Blocklist")
	t.Cleanup(func() { _ = b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr) })
	s.must(b.Blocklist(ctx, p.MonHost, p.Cred, addr, time.Minute), "Blocklist again")
	if !slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is not on the blocklist %v", addr, s.Blocklisted(t))
	}
	if ws, err := b.Watchers(ctx, p, name); err != nil || len(ws) != 0 {
		t.Fatalf("Watchers after blocklisting the client: %+v, %v; want none", ws, err)
	}

	s.must(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, addr), "Unblocklist")
	s.must(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, addr), "Unblocklist again")
	if slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is still on the blocklist after Unblocklist", addr)
	}
	s.wantErr(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, "10.0.0.0/24 "), "Unblocklist of a malformed address", rbd.ErrInvalid)
}
