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
	if cs, err := b.Clients(ctx, p, name); err != nil || len(cs) != 0 {
		t.Fatalf("Clients of an image nobody opened: %v, %v", cs, err)
	}
	_, err := b.Clients(ctx, p, s.name("missing"))
	s.wantErr(err, "Clients of a missing image", rbd.ErrNotFound)

	unwatch := s.Watch(t, p, name)
	defer unwatch()
	cs, err := b.Clients(ctx, p, name)
	s.must(err, "Clients")
	if len(cs) != 1 || cs[0].Own || !cs[0].Watch || cs[0].Lock || rbd.ValidClientAddr(cs[0].Addr) != nil {
		t.Fatalf("Clients with another client watching = %+v, want one, watching, not our own, at ip:port/nonce", cs)
	}
	addr := cs[0].Addr

	s.wantErr(b.Blocklist(ctx, p.MonHost, p.Cred, "127.0.0.1", time.Minute), "Blocklist of a whole host", rbd.ErrInvalid)
	s.wantErr(b.Blocklist(ctx, p.MonHost, p.Cred, addr, 0), "Blocklist without an expiry", rbd.ErrInvalid)
	s.must(b.Blocklist(ctx, p.MonHost, p.Cred, addr, time.Minute), "Blocklist")
	t.Cleanup(func() { _ = b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr) })
	s.must(b.Blocklist(ctx, p.MonHost, p.Cred, addr, time.Minute), "Blocklist again")
	if !slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is not on the blocklist %v", addr, s.Blocklisted(t))
	}
	if cs, err := b.Clients(ctx, p, name); err != nil || len(cs) != 0 {
		t.Fatalf("Clients after blocklisting the watcher: %+v, %v; want none", cs, err)
	}

	s.must(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, addr), "Unblocklist")
	s.must(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, addr), "Unblocklist again")
	if slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is still on the blocklist after Unblocklist", addr)
	}
	s.wantErr(b.Unblocklist(ctx, p.MonHost, s.Unblocklister, "10.0.0.0/24 "), "Unblocklist of a malformed address", rbd.ErrInvalid)
}

// A client that wrote holds the exclusive lock as well as its watch. The
// lock outlives the watch, which blocklisting drops as a cut-off node's
// times out: the client is still listed, by its lock, until BreakLock
// (of its address; another's is a no-op) removes it.
func testLockHolderOutlivesItsWatch(t *testing.T, s *suite) {
	b, p, ctx, name := s.Backend, s.Pool, s.ctx(), s.name("img")
	s.must(b.CreateImage(ctx, p, name, rbd.ImageSpec{Size: mib, Features: []string{"layering", "exclusive-lock"}}), "CreateImage")
	unmap := s.Map(t, p, name)
	defer unmap()
	cs, err := b.Clients(ctx, p, name)
	s.must(err, "Clients")
	if len(cs) != 1 || cs[0].Own || !cs[0].Watch || !cs[0].Lock {
		t.Fatalf("Clients with a writer = %+v, want one, watching and locking", cs)
	}
	addr := cs[0].Addr
	s.must(b.BreakLock(ctx, p, name, "127.0.0.1:0/1"), "BreakLock of a client that holds no lock")
	s.must(b.Blocklist(ctx, p.MonHost, p.Cred, addr, time.Minute), "Blocklist")
	t.Cleanup(func() { _ = b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr) })
	cs, err = b.Clients(ctx, p, name)
	s.must(err, "Clients")
	if len(cs) != 1 || cs[0].Addr != addr || cs[0].Watch || !cs[0].Lock {
		t.Fatalf("Clients after blocklisting the writer = %+v, want %s by its lock alone", cs, addr)
	}
	s.must(b.BreakLock(ctx, p, name, addr), "BreakLock")
	s.must(b.BreakLock(ctx, p, name, addr), "BreakLock again")
	if cs, err := b.Clients(ctx, p, name); err != nil || len(cs) != 0 {
		t.Fatalf("Clients after breaking the lock: %+v, %v; want none", cs, err)
	}
}
