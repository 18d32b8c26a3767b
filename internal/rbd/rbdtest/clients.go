package rbdtest

import (
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A client with the image open is listed by its address, not as one of
// the backend's own. Blocklisting it drops its watch once the OSD has the
// new map (the controller waits for that too: fenceSettled), an entry the
// CSI user may add, and a repeat is fine; lifting it, also twice, takes it
// off the blocklist. A malformed address is refused before it reaches the
// monitor. Each call has a deadline of its own: the wait for the dropped
// watch may take most of one.
func testBlocklist(t *testing.T, s *suite) {
	b, p, name := s.Backend, s.Pool, s.name("img")
	s.create(name, mib, nil)
	if cs, err := b.Clients(s.ctx(), p, name); err != nil || len(cs) != 0 {
		t.Fatalf("Clients of an image nobody opened: %v, %v", cs, err)
	}
	_, err := b.Clients(s.ctx(), p, s.name("missing"))
	s.wantErr(err, "Clients of a missing image", rbd.ErrNotFound)

	unwatch := s.Watch(t, p, name)
	defer unwatch()
	cs, err := b.Clients(s.ctx(), p, name)
	s.must(err, "Clients")
	if len(cs) != 1 || cs[0].Own || !cs[0].Watch || cs[0].Lock || rbd.ValidClientAddr(cs[0].Addr) != nil {
		t.Fatalf("Clients with another client watching = %+v, want one, watching, not our own, at ip:port/nonce", cs)
	}
	addr := cs[0].Addr

	s.wantErr(b.Blocklist(s.ctx(), p.MonHost, p.Cred, "127.0.0.1", time.Minute), "Blocklist of a whole host", rbd.ErrInvalid)
	s.wantErr(b.Blocklist(s.ctx(), p.MonHost, p.Cred, addr, 0), "Blocklist without an expiry", rbd.ErrInvalid)
	s.must(b.Blocklist(s.ctx(), p.MonHost, p.Cred, addr, time.Minute), "Blocklist")
	t.Cleanup(func() { _ = b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr) })
	s.must(b.Blocklist(s.ctx(), p.MonHost, p.Cred, addr, time.Minute), "Blocklist again")
	if !slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is not on the blocklist %v", addr, s.Blocklisted(t))
	}
	s.waitClients(name, "blocklisting the watcher", "none", func(cs []rbd.Client) bool { return len(cs) == 0 })

	s.must(b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr), "Unblocklist")
	s.must(b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, addr), "Unblocklist again")
	if slices.Contains(s.Blocklisted(t), addr) {
		t.Fatalf("%s is still on the blocklist after Unblocklist", addr)
	}
	s.wantErr(b.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, "10.0.0.0/24 "), "Unblocklist of a malformed address", rbd.ErrInvalid)
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
	s.waitClients(name, "blocklisting the writer", addr+" by its lock alone", func(cs []rbd.Client) bool {
		return len(cs) == 1 && cs[0].Addr == addr && !cs[0].Watch && cs[0].Lock
	})
	// Deadlines of their own: the wait above may take most of the 30 s
	// ctx was given (the watch's timeout, longer on a loaded machine).
	s.must(b.BreakLock(s.ctx(), p, name, addr), "BreakLock")
	s.must(b.BreakLock(s.ctx(), p, name, addr), "BreakLock again")
	if cs, err := b.Clients(s.ctx(), p, name); err != nil || len(cs) != 0 {
		t.Fatalf("Clients after breaking the lock: %+v, %v; want none", cs, err)
	}
}

// waitClients polls Clients until ok accepts them: an OSD drops a
// blocklisted client's watch when its placement group takes the new map,
// which may come just after the backend's next call. Half a minute, then
// the test fails with what Ceph listed last.
func (s *suite) waitClients(name, after, want string, ok func([]rbd.Client) bool) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, err := s.Backend.Clients(s.ctx(), s.Pool, name)
		s.must(err, "Clients")
		if ok(cs) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Clients 30 s after %s = %+v, want %s", after, cs, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
