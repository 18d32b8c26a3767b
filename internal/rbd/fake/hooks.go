package fake

import (
	"fmt"
	"sort"
	"sync"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The hooks below make, on purpose, states that other clients, crashes and
// races leave in a real cluster, so tests can show the code above copes.

// Watch opens the image as another client would (a node that mapped it):
// it counts among the image's watchers until unwatch is called.
func (c *Ceph) Watch(p rbd.Pool, name string) (unwatch func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return nil, err
	}
	img.watchers++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			img.watchers--
		})
	}, nil
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
// their context ends, PoolFull says so.
func (c *Ceph) SetFull(poolName string, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.full = full
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
