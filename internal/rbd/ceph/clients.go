package ceph

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Clients lists the clients watching the image's header or holding its
// exclusive lock, each once, marked Own when it is one of this backend's
// cached connections.
func (b *Backend) Clients(ctx context.Context, p rbd.Pool, name string) ([]rbd.Client, error) {
	var out []rbd.Client
	err := b.withLockers(ctx, p, name, "Clients", func(_ *rados.IOContext, img *librbd.Image, lockers []librbd.Locker) error {
		ws, err := img.ListWatchers()
		if err != nil {
			return fmt.Errorf("watchers of image %s/%s: %w", p.Name, name, classify(err))
		}
		// Our addresses are read after the lists: a connection made in
		// between cannot be in them, while one made before is still
		// cached here (connections go only when idle), so no watch or
		// lock of ours is taken for another client's.
		own, err := b.conns.ownAddrs()
		if err != nil {
			return err
		}
		byAddr := map[string]*rbd.Client{}
		var order []string
		add := func(addr string) *rbd.Client {
			if c, ok := byAddr[addr]; ok {
				return c
			}
			byAddr[addr] = &rbd.Client{Addr: addr, Own: ownsAny(own, addr)}
			order = append(order, addr)
			return byAddr[addr]
		}
		for _, w := range ws {
			add(plainAddr(w.Addr)).Watch = true
		}
		for _, l := range lockers {
			add(plainAddr(l.Addr)).Lock = true
		}
		for _, a := range order {
			out = append(out, *byAddr[a])
		}
		return nil
	})
	return out, err
}

// Names of librbd's exclusive lock on the header object (RBD_LOCK_NAME in
// Ceph's rbd_types.h, and the tag ManagedLock gives it), which a user's
// advisory lock (`rbd lock add`) does not carry.
const (
	rbdLockName = "rbd_lock"
	rbdLockTag  = "internal"
)

// withLockers opens the image read-only (a read-write open would add a
// watch of our own) and calls f with it and the holders of its exclusive
// lock.
func (b *Backend) withLockers(ctx context.Context, p rbd.Pool, name, op string, f func(*rados.IOContext, *librbd.Image, []librbd.Locker) error) error {
	return b.withIoctx(ctx, p, op, func(ioctx *rados.IOContext) error {
		img, err := openRO(ioctx, name, "")
		if err != nil {
			return err
		}
		defer img.Close()
		lockers, err := exclusiveLockers(img)
		if err != nil {
			return fmt.Errorf("lock holders of image %s/%s: %w", p.Name, name, err)
		}
		return f(ioctx, img, lockers)
	})
}

// exclusiveLockers returns the holders of the image's exclusive lock.
func exclusiveLockers(img *librbd.Image) ([]librbd.Locker, error) {
	tag, lockers, err := img.ListLockers()
	if err != nil {
		return nil, classify(err)
	}
	// go-ceph keeps the C string's terminating NUL in the tag.
	if strings.TrimRight(tag, "\x00") != rbdLockTag {
		return nil, nil
	}
	return lockers, nil
}

// BreakLock removes the exclusive lock the client at addr holds, as a
// RADOS lock break on the header object: librbd's rbd_break_lock would
// blocklist the holder again, with its own expiry in place of the
// caller's.
func (b *Backend) BreakLock(ctx context.Context, p rbd.Pool, name, addr string) error {
	return b.withLockers(ctx, p, name, "BreakLock", func(ioctx *rados.IOContext, img *librbd.Image, lockers []librbd.Locker) error {
		id, err := img.GetId()
		if err != nil {
			return fmt.Errorf("id of image %s/%s: %w", p.Name, name, classify(err))
		}
		for _, l := range lockers {
			if plainAddr(l.Addr) != plainAddr(addr) {
				continue
			}
			// go-ceph answers ENOENT (the lock went in between, which is
			// what we want) and EINVAL (a holder it cannot parse) with a
			// nil error.
			ret, err := ioctx.BreakLock("rbd_header."+id, rbdLockName, l.Client, l.Cookie)
			if err == nil && ret == -int(syscall.EINVAL) {
				err = fmt.Errorf("%w: Ceph cannot parse the lock holder %q", rbd.ErrInvalid, l.Client)
			}
			if err != nil {
				return fmt.Errorf("breaking the lock %s holds on image %s/%s: %w", addr, p.Name, name, classify(err))
			}
		}
		return nil
	})
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

// plainAddr is the client's ip:port/nonce, whatever form Ceph gave it in.
func plainAddr(s string) string {
	if as := clientAddrs(s); len(as) > 0 {
		return as[0]
	}
	return s
}

// IsClient reports whether a watcher's address names the client whose
// rados_getaddrs answer is getaddrs: how Clients tells its own
// connections' watches apart in Clients (e2e/contract pins it on each release).
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
