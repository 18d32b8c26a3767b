package fake

import (
	"fmt"
	"slices"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The hooks below make what a peer site and its rbd-mirror daemon do to
// this site's copy of a mirrored image, for tests of the code above.

// SetPoolMirrorMode sets a pool's mirror mode, as `rbd mirror pool enable
// POOL MODE` does: "image" lets images be mirrored one by one.
func (c *Ceph) SetPoolMirrorMode(poolName, mode string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.mirrorMode = mode
	}
}

// PeerPool gives the pool a mirror peer, as `rbd mirror pool peer
// bootstrap import` does: mirror snapshots then have a site to go to.
func (c *Ceph) PeerPool(poolName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl := c.pools[poolName]; pl != nil {
		pl.peered = true
	}
}

// MakeNonPrimary turns a mirrored image into a non-primary copy of a
// primary on a peer, as rbd-mirror makes it when a snapshot of the peer's
// arrives: demoted says it is the peer's demotion (the copy may be
// promoted without force).
func (c *Ceph) MakeNonPrimary(p rbd.Pool, name string, demoted bool) error {
	return c.hookMirrored(p, name, func(img *image) {
		img.mirror.primary, img.mirror.demoted, img.mirror.demotedHere = false, demoted, false
		c.mirrorSnap(img)
	})
}

// SetMirrorStatus sets what the rbd-mirror daemons report on the image.
func (c *Ceph) SetMirrorStatus(p rbd.Pool, name string, st rbd.MirrorStatus) error {
	st.Peers = slices.Clone(st.Peers)
	return c.hookMirrored(p, name, func(img *image) { img.mirror.status = st })
}

// ResyncRequested reports whether the copy is flagged for a resync.
func (c *Ceph) ResyncRequested(p rbd.Pool, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	return err == nil && img.mirror != nil && img.mirror.resync
}

// MirrorSnapshots counts the image's mirror snapshots.
func (c *Ceph) MirrorSnapshots(p rbd.Pool, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil || img.mirror == nil {
		return 0
	}
	return len(img.mirror.snaps)
}

// SetMirrorSyncing says whether the peer's rbd-mirror is writing a sync
// into this copy (librbd then refuses a promote with EROFS).
func (c *Ceph) SetMirrorSyncing(p rbd.Pool, name string, syncing bool) error {
	return c.hookMirrored(p, name, func(img *image) { img.mirror.syncing = syncing })
}

// hookMirrored applies a hook's change to a mirrored image, under the
// lock; an image that is not mirrored is ErrNotMirrored.
func (c *Ceph) hookMirrored(p rbd.Pool, name string, change func(*image)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, img, err := c.named(p, name)
	if err != nil {
		return err
	}
	if img.mirror == nil {
		return fmt.Errorf("%w: image %s", rbd.ErrNotMirrored, name)
	}
	change(img)
	return nil
}
