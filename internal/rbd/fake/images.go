package fake

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// beginWrite is begin for a call that writes: Ceph holds writes to a full
// pool until they time out, so does the fake, until ctx ends.
func (c *Ceph) beginWrite(ctx context.Context, p rbd.Pool) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	if pl := c.pools[p.Name]; pl == nil || !pl.full {
		return nil
	}
	c.mu.Unlock()
	<-ctx.Done()
	return c.begin(ctx)
}

// enter is beginWrite for a write, else begin.
func (c *Ceph) enter(ctx context.Context, p rbd.Pool, write bool) error {
	if write {
		return c.beginWrite(ctx, p)
	}
	return c.begin(ctx)
}

// CreateImage creates an image, then sets its metadata in a second step,
// with the fault point "CreateImage:created" between the two.
func (c *Ceph) CreateImage(ctx context.Context, p rbd.Pool, name string, spec rbd.ImageSpec) error {
	if err := c.beginWrite(ctx, p); err != nil {
		return err
	}
	s, err := c.imageSpace(p)
	if err == nil {
		_, err = c.create(s, name, spec.Size, spec.Features)
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("creating image %s/%s: %w", p.Name, name, err)
	}
	c.fault("CreateImage:created")
	return c.SetMetadata(ctx, p, name, spec.Metadata)
}

// create adds an image to the directory. Called with c.mu held.
func (c *Ceph) create(s *space, name string, size uint64, features []string) (*image, error) {
	if _, taken := s.dir[name]; taken {
		return nil, fmt.Errorf("%w: image %s", rbd.ErrExists, name)
	}
	c.nextID++
	img := &image{id: "f" + strconv.FormatUint(c.nextID, 16), name: name, size: size, meta: map[string]string{}, created: c.now()}
	img.features = slices.Sorted(slices.Values(features))
	s.dir[name], s.images[img.id] = img.id, img
	return img, nil
}

// withImage runs fn on a named image under the lock.
func (c *Ceph) withImage(ctx context.Context, p rbd.Pool, name string, write bool, fn func(*space, *image) error) error {
	if err := c.enter(ctx, p, write); err != nil {
		return err
	}
	defer c.mu.Unlock()
	s, img, err := c.named(p, name)
	if err != nil {
		return err
	}
	return fn(s, img)
}

// SetMetadata sets keys on an image.
func (c *Ceph) SetMetadata(ctx context.Context, p rbd.Pool, name string, kv map[string]string) error {
	if len(kv) == 0 {
		return nil
	}
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		for k, v := range kv {
			img.meta[k] = v
		}
		return nil
	})
}

// RemoveMetadata removes keys; missing ones are fine.
func (c *Ceph) RemoveMetadata(ctx context.Context, p rbd.Pool, name string, keys ...string) error {
	return c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		for _, k := range keys {
			delete(img.meta, k)
		}
		return nil
	})
}

// Stat reads an image.
func (c *Ceph) Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error) {
	var info rbd.ImageInfo
	err := c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		info = img.info()
		return nil
	})
	return info, err
}

func (img *image) info() rbd.ImageInfo {
	return rbd.ImageInfo{Name: img.name, ID: img.id, Size: img.size, Metadata: copyMap(img.meta), Features: slices.Clone(img.features)}
}

// Resize sets the size.
func (c *Ceph) Resize(ctx context.Context, p rbd.Pool, name string, size uint64) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		img.size = size
		img.data = img.data.cut(size, max(size, maxEnd(img.data)))
		img.overlap = min(img.overlap, size)
		return nil
	})
}

// Rename renames an image.
func (c *Ceph) Rename(ctx context.Context, p rbd.Pool, from, to string) error {
	return c.withImage(ctx, p, from, false, func(s *space, img *image) error {
		if _, taken := s.dir[to]; taken {
			return fmt.Errorf("%w: image %s", rbd.ErrExists, to)
		}
		delete(s.dir, from)
		s.dir[to], img.name = img.id, to
		return nil
	})
}

// ListImages lists the pool directory, headerless entries included.
func (c *Ceph) ListImages(ctx context.Context, p rbd.Pool) ([]string, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(s.dir))
	for n := range s.dir {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// RemoveImage removes an image as librbd does: refused while it has user
// or group snapshots or trashed ones a clone needs (ErrHasSnapshots), then
// while another client watches it or it is in a group (ErrBusy; librbd's
// EMLINK). Trashed snapshots without clones go with it; a clone is
// detached from its parent's snapshot. A directory entry without a header
// is dropped.
func (c *Ceph) RemoveImage(ctx context.Context, p rbd.Pool, name string) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	s, err := c.space(p)
	if err != nil {
		return err
	}
	id, listed := s.dir[name]
	if !listed {
		return fmt.Errorf("removing image %s/%s: %w", p.Name, name, rbd.ErrNotFound)
	}
	img := s.images[id]
	if img == nil {
		delete(s.dir, name)
		return nil
	}
	for _, sn := range img.snaps {
		if !sn.trash || len(sn.children) > 0 {
			return fmt.Errorf("removing image %s/%s: %w", p.Name, name, rbd.ErrHasSnapshots)
		}
	}
	if len(img.watchers) > 0 {
		return fmt.Errorf("removing image %s/%s: %w", p.Name, name, rbd.ErrBusy)
	}
	if img.group != nil {
		return fmt.Errorf("removing image %s/%s: %w: it is in group %s", p.Name, name, rbd.ErrBusy, img.group.name)
	}
	if img.mirror != nil && !img.mirror.primary {
		return fmt.Errorf("removing image %s/%s: %w: it is a non-primary mirror copy", p.Name, name, rbd.ErrInvalid)
	}
	delete(c.schedules, scheduleKey(p, img))
	c.detach(p, img)
	delete(s.dir, name)
	delete(s.images, id)
	return nil
}
