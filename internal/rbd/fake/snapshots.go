package fake

import (
	"context"
	"fmt"
	"strconv"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// childKey names a clone among a snapshot's children.
func childKey(p rbd.Pool, imageID string) string {
	return p.Name + "/" + p.Namespace + "/" + imageID
}

// StatFamily reads an image by name, or by ID when name is empty.
func (c *Ceph) StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error) {
	if err := c.begin(ctx); err != nil {
		return rbd.Family{}, err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return rbd.Family{}, err
	}
	var img *image
	if name != "" {
		img, err = s.byName(name)
	} else {
		img, err = s.byID(id)
	}
	if err != nil {
		return rbd.Family{}, err
	}
	f := rbd.Family{ImageInfo: img.info(), Watchers: len(img.watchers), Created: img.created}
	for _, sn := range img.snaps {
		switch {
		case sn.group != "":
			// Not the user's, and it blocks the image's removal as
			// long as its group snapshot lives, as the real backend
			// counts it.
			f.TrashedSnaps++
		case !sn.trash:
			f.Snaps = append(f.Snaps, rbd.SnapInfo{Name: sn.name, ID: sn.id, Size: sn.size, Created: sn.created})
		case len(sn.children) > 0:
			f.TrashedSnaps++
		}
	}
	if img.mirror != nil {
		mi := img.mirrorInfo()
		f.Mirror = &mi
	}
	if l := img.parent; l != nil {
		parent, sn := c.parentOf(l)
		f.Parent = &rbd.Parent{Pool: l.pool, ImageID: l.imageID, SnapID: l.snapID}
		if parent != nil {
			f.Parent.Image = parent.name
		}
		if sn != nil {
			f.Parent.Snap = sn.name
		}
	}
	return f, nil
}

// parentOf resolves a link; either may be nil when a hook broke it.
// Called with c.mu held.
func (c *Ceph) parentOf(l *link) (*image, *snapshot) {
	pl := c.pools[l.pool]
	if pl == nil || pl.spaces[l.ns] == nil {
		return nil, nil
	}
	img := pl.spaces[l.ns].images[l.imageID]
	if img == nil {
		return nil, nil
	}
	for _, sn := range img.snaps {
		if sn.id == l.snapID {
			return img, sn
		}
	}
	return img, nil
}

// detach unlinks a clone from its parent's snapshot; a trashed snapshot
// goes with its last clone. Called with c.mu held.
func (c *Ceph) detach(p rbd.Pool, img *image) {
	l := img.parent
	if l == nil {
		return
	}
	img.parent = nil
	parent, sn := c.parentOf(l)
	if sn == nil {
		return
	}
	delete(sn.children, childKey(p, img.id))
	if sn.trash && len(sn.children) == 0 {
		parent.dropSnap(sn.id)
	}
}

func (img *image) dropSnap(id uint64) {
	for i, sn := range img.snaps {
		if sn.id == id {
			img.snaps = append(img.snaps[:i], img.snaps[i+1:]...)
			return
		}
	}
}

func (img *image) userSnap(name string) *snapshot {
	for _, sn := range img.snaps {
		if !sn.trash && sn.group == "" && sn.name == name {
			return sn
		}
	}
	return nil
}

// liveSnap finds a snapshot by ID in the user or the group namespace, as
// rbd_clone4 reaches it (not a trashed one).
func (img *image) liveSnap(id uint64) *snapshot {
	for _, sn := range img.snaps {
		if !sn.trash && sn.id == id {
			return sn
		}
	}
	return nil
}

// release removes a snapshot the user or its group snapshot deleted, or
// moves it to the trash namespace (under a name of its own, as RBD does)
// while clones need it.
func (img *image) release(sn *snapshot) {
	if len(sn.children) == 0 {
		img.dropSnap(sn.id)
		return
	}
	sn.trash, sn.group, sn.name = true, "", "trashed-"+strconv.FormatUint(sn.id, 10)
}

// CreateSnapshot snapshots an image at its current size.
func (c *Ceph) CreateSnapshot(ctx context.Context, p rbd.Pool, name, snap string) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		if img.userSnap(snap) != nil {
			return fmt.Errorf("snapshot %s/%s@%s: %w", p.Name, name, snap, rbd.ErrExists)
		}
		c.nextID++
		img.snaps = append(img.snaps, img.snapshot(c.nextID, snap, c.now()))
		return nil
	})
}

// RemoveSnapshot deletes a user snapshot, or moves it to the trash
// namespace (under a name of its own, as RBD does) while clones need it.
func (c *Ceph) RemoveSnapshot(ctx context.Context, p rbd.Pool, imageID, snap string) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return err
	}
	img, err := s.byID(imageID)
	if err != nil {
		return err
	}
	sn := img.userSnap(snap)
	if sn == nil {
		return fmt.Errorf("removing snapshot %s: %w", snap, rbd.ErrNotFound)
	}
	img.release(sn)
	return nil
}

// Clone makes a format 2 clone with the fault point "Clone:cloned" between
// linking it and setting it up (size, metadata), as the real backend. A
// parent snapshot named by ParentSnapID may be a group snapshot's.
func (c *Ceph) Clone(ctx context.Context, parent, child rbd.Pool, name string, spec rbd.CloneSpec) error {
	if spec.ParentSnapID != 0 && c.groupSnaps != nil {
		return c.groupSnaps
	}
	if err := c.link(ctx, parent, child, name, spec); err != nil {
		return err
	}
	c.fault("Clone:cloned")
	return c.withImage(ctx, child, name, true, func(_ *space, img *image) error {
		if spec.Size > img.size {
			img.size = spec.Size
		}
		for k := range img.meta {
			if spec.Drops(k) {
				delete(img.meta, k)
			}
		}
		for k, v := range spec.Metadata {
			img.meta[k] = v
		}
		return nil
	})
}

// link makes the clone image: the snapshot's size, the parent's metadata
// (librbd copies it), a link to the snapshot.
func (c *Ceph) link(ctx context.Context, parent, child rbd.Pool, name string, spec rbd.CloneSpec) error {
	if err := c.beginWrite(ctx, child); err != nil {
		return err
	}
	defer c.mu.Unlock()
	ps, err := c.space(parent)
	if err != nil {
		return err
	}
	pimg, err := ps.byName(spec.ParentImage)
	if err != nil {
		return err
	}
	ref := spec.ParentImage + "@" + spec.ParentSnap
	sn := pimg.userSnap(spec.ParentSnap)
	if spec.ParentSnapID != 0 {
		ref = spec.ParentImage + "@#" + strconv.FormatUint(spec.ParentSnapID, 10)
		sn = pimg.liveSnap(spec.ParentSnapID)
	}
	if sn == nil {
		return fmt.Errorf("cloning %s: snapshot %w", ref, rbd.ErrNotFound)
	}
	cs, err := c.imageSpace(child)
	if err != nil {
		return err
	}
	img, err := c.create(cs, name, sn.size, spec.Features)
	if err != nil {
		return fmt.Errorf("cloning %s to %s: %w", ref, name, err)
	}
	img.meta = copyMap(pimg.meta)
	img.parent = &link{pool: parent.Name, ns: parent.Namespace, imageID: pimg.id, snapID: sn.id}
	img.overlap = sn.size
	sn.children[childKey(child, img.id)] = true
	return nil
}

// Flatten copies the parent's data a clone reads into it (as new writes,
// as RBD's copy-up) and detaches it; an image without a parent is
// ErrInvalid, as in librbd.
func (c *Ceph) Flatten(ctx context.Context, p rbd.Pool, name string) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		if img.parent == nil {
			return fmt.Errorf("flattening %s/%s: image has no parent: %w", p.Name, name, rbd.ErrInvalid)
		}
		c.copyUp(img)
		c.detach(p, img)
		return nil
	})
}

// Sparsify checks that the image exists and counts the call: the fake
// keeps no data to give back (Sparsified reports the count).
func (c *Ceph) Sparsify(ctx context.Context, p rbd.Pool, name string) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		img.sparsified++
		return nil
	})
}
