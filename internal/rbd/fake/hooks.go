package fake

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The hooks below make, on purpose, states that other clients, crashes and
// races leave in a real cluster, so tests can show the code above copes.

// Watch opens the image as another client would (a node that mapped it):
// it is among the image's watchers, with an address of its own, until
// unwatch is called or the client is blocklisted (Watchers tells the
// address).
func (c *Ceph) Watch(p rbd.Pool, name string) (unwatch func(), err error) {
	return c.watchAs(p, name, c.newAddr())
}

// WatchFrom opens the image as a client on the host at ip does (the peer
// site's rbd-mirror, watching a primary it replays): it returns that
// client's address, on the image until unwatch.
func (c *Ceph) WatchFrom(p rbd.Pool, name string, ip netip.Addr) (unwatch func(), addr string, err error) {
	addr = c.newAddrAt(ip)
	unwatch, err = c.watchAs(p, name, addr)
	return unwatch, addr, err
}

// WatchOwn opens the image as this client itself does when it writes
// metadata or flattens: Watchers marks the watch Own.
func (c *Ceph) WatchOwn(p rbd.Pool, name string) (unwatch func(), err error) {
	return c.watchAs(p, name, c.addr)
}

func (c *Ceph) watchAs(p rbd.Pool, name, addr string) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return nil, err
	}
	img.watchers = append(img.watchers, addr)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if i := slices.Index(img.watchers, addr); i >= 0 {
				img.watchers = slices.Delete(img.watchers, i, i+1)
			}
		})
	}, nil
}

// Mapping is a client that opened an image and wrote to it, as a node's
// mapping does: it watches the image and holds its exclusive lock.
type Mapping struct {
	c    *Ceph
	img  *image
	Addr string
}

// Map makes a Mapping of the image, with an address of its own.
func (c *Ceph) Map(p rbd.Pool, name string) (*Mapping, error) {
	return c.mapAs(p, name, c.newAddr())
}

// MapFrom makes a Mapping of the image by a client on the host at ip.
func (c *Ceph) MapFrom(p rbd.Pool, name string, ip netip.Addr) (*Mapping, error) {
	return c.mapAs(p, name, c.newAddrAt(ip))
}

func (c *Ceph) mapAs(p rbd.Pool, name, addr string) (*Mapping, error) {
	if _, err := c.watchAs(p, name, addr); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return nil, err
	}
	img.locker = addr
	return &Mapping{c: c, img: img, Addr: addr}, nil
}

// CutOff makes the mapping's node unreachable for longer than the OSDs
// wait for a watch: Ceph drops its watch, and it keeps the lock.
func (m *Mapping) CutOff() {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.img.watchers = slices.DeleteFunc(m.img.watchers, func(a string) bool { return a == m.Addr })
}

// Unmap closes the image: the watch and the lock go.
func (m *Mapping) Unmap() {
	m.CutOff()
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if m.img.locker == m.Addr {
		m.img.locker = ""
	}
}

// Blocklisted returns the blocklist: each barred address and when its
// entry expires.
func (c *Ceph) Blocklisted() map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.blocklist)
}

// FailBlocklist makes every Blocklist call fail with err until it is
// called with nil, as a monitor that refuses (rbd.ErrPermission: a user
// without mon 'profile rbd') or does not answer does.
func (c *Ceph) FailBlocklist(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blocklistErr = err
}

// RejectUser makes the monitors refuse the user, as they refuse one that
// does not exist, whose key is not its key or that has no mon caps: every
// call as that user fails to connect.
func (c *Ceph) RejectUser(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rejected[id] = true
}

// DenyPools makes the user one whose caps cover no pool (mon 'profile
// rbd' and no osd caps): the monitors let it in, and every call on a
// pool is refused.
func (c *Ceph) DenyPools(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.poolless[id] = true
}

// RemoveHeader leaves an image as an interrupted removal does: listed in
// the pool directory, without a header (nothing opens it, by name or ID).
// Links to and from it stay as they were, as RBD's do.
func (c *Ceph) RemoveHeader(p rbd.Pool, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, img, err := c.named(p, name)
	if err != nil {
		return err
	}
	delete(s.images, img.id)
	return nil
}

// DetachBehind unlinks a clone from its parent's snapshot the way a detach
// that lost a race with another does: the clone has no parent any more,
// the snapshot no longer lists it, and a trashed snapshot stays although
// it has no clone left.
func (c *Ceph) DetachBehind(p rbd.Pool, child string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, child)
	if err != nil {
		return err
	}
	if img.parent == nil {
		return fmt.Errorf("%w: %s is not a clone", rbd.ErrInvalid, child)
	}
	if _, sn := c.parentOf(img.parent); sn != nil {
		delete(sn.children, childKey(p, img.id))
	}
	img.parent = nil
	return nil
}

// IncompleteGroupSnap leaves the group snapshot snap as a taker that
// crashed midway does: recorded as incomplete, with a snapshot (in the
// group namespace) of the group's first image only.
func (c *Ceph) IncompleteGroupSnap(p rbd.Pool, group, snap string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return err
	}
	g := s.groups[group]
	switch {
	case g == nil:
		return fmt.Errorf("%w: group %s", rbd.ErrNotFound, group)
	case g.snap(snap) != nil:
		return fmt.Errorf("%w: group snapshot %s@%s", rbd.ErrExists, group, snap)
	}
	_, err = c.takeSnap(s, g, snap, g.images[:min(1, len(g.images))])
	return err
}

// Sparsified reports how often Sparsify ran on the image (0 if none).
func (c *Ceph) Sparsified(p rbd.Pool, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, img, err := c.named(p, name); err == nil {
		return img.sparsified
	}
	return 0
}

// SetFull marks a pool full, as a reached quota does: writes wait until
// their context ends, PoolHealth says so.
func (c *Ceph) SetFull(poolName string, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.full = full
	}
}

// SetNearFull marks a pool nearly full, as an OSD past its nearfull ratio
// does: PoolHealth says so, writes go on.
func (c *Ceph) SetNearFull(poolName string, near bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.nearFull = near
	}
}

// SetInactivePGs makes PoolHealth report n of the pool's placement groups
// stuck inactive (only the report: I/O goes on).
func (c *Ceph) SetInactivePGs(poolName string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.inactive = n
	}
}

// Contents lists what a pool's RADOS namespace holds: image names (with
// headers or not), every snapshot as image@snap (trashed ones included)
// and RADOS object names, each sorted. Tests use it to show nothing leaked.
func (c *Ceph) Contents(p rbd.Pool) (images, snaps, objects []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return nil, nil, nil
	}
	for name, id := range s.dir {
		images = append(images, name)
		if img := s.images[id]; img != nil {
			for _, sn := range img.snaps {
				snaps = append(snaps, name+"@"+sn.name)
			}
		}
	}
	for name := range s.objects {
		objects = append(objects, name)
	}
	sort.Strings(images)
	sort.Strings(snaps)
	sort.Strings(objects)
	return images, snaps, objects
}
