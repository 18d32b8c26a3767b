package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// group is an RBD group: images of its space, and the snapshots taken
// of all of them at once.
type group struct {
	id, name string
	images   []string // member image IDs, in the order they were added
	snaps    []*groupSnap
}

// groupSnap is a group snapshot: the snapshot (in the group namespace)
// it took of each image. An incomplete one is what a taker that crashed
// midway leaves: a record, and snapshots of some of the images.
type groupSnap struct {
	id, name string
	complete bool
	members  []groupMember
}

type groupMember struct {
	imageID string
	snapID  uint64
}

// GroupSnapshots is nil, or ErrNotSupported for a client made with
// Options.NoGroupSnapshots.
func (c *Ceph) GroupSnapshots() error { return c.groupSnaps }

// withGroup runs fn on a group under the lock; a missing one is
// ErrNotFound.
func (c *Ceph) withGroup(ctx context.Context, p rbd.Pool, name string, write bool, fn func(*space, *group) error) error {
	if c.groupSnaps != nil {
		return c.groupSnaps
	}
	var err error
	if serr := c.withSpace(ctx, p, write, func(s *space) {
		if g := s.groups[name]; g != nil {
			err = fn(s, g)
		} else {
			err = fmt.Errorf("group %s/%s: %w", p.Name, name, rbd.ErrNotFound)
		}
	}); serr != nil {
		return serr
	}
	return err
}

// CreateGroup makes an empty group; a taken name is ErrExists.
func (c *Ceph) CreateGroup(ctx context.Context, p rbd.Pool, name string) error {
	if c.groupSnaps != nil {
		return c.groupSnaps
	}
	if err := c.beginWrite(ctx, p); err != nil {
		return err
	}
	defer c.mu.Unlock()
	s, err := c.imageSpace(p)
	if err != nil {
		return fmt.Errorf("creating group %s/%s: %w", p.Name, name, err)
	}
	if s.groups[name] != nil {
		return fmt.Errorf("creating group %s/%s: %w", p.Name, name, rbd.ErrExists)
	}
	c.nextID++
	s.groups[name] = &group{id: "g" + strconv.FormatUint(c.nextID, 16), name: name}
	return nil
}

// AddToGroup adds an image to a group: one already there is fine, one in
// another group is ErrExists naming it.
func (c *Ceph) AddToGroup(ctx context.Context, p rbd.Pool, name, image string) error {
	return c.withGroup(ctx, p, name, true, func(s *space, g *group) error {
		img, err := s.byName(image)
		switch {
		case err != nil:
			return fmt.Errorf("adding image %s/%s to group %s: %w", p.Name, image, name, err)
		case img.group == g:
			return nil
		case img.group != nil:
			return fmt.Errorf("adding image %s/%s to group %s: %w (in group %s)", p.Name, image, name, rbd.ErrExists, img.group.name)
		}
		img.group = g
		g.images = append(g.images, img.id)
		return nil
	})
}

// SnapshotGroup takes a snapshot of every image of the group, in the group
// namespace, or returns the complete one of that name; an incomplete one
// is removed and taken again. The fault point "SnapshotGroup:taken" is
// between taking it and reading its members, as in the real backend.
func (c *Ceph) SnapshotGroup(ctx context.Context, p rbd.Pool, name, snap string) (rbd.GroupSnap, error) {
	var taken bool
	err := c.withGroup(ctx, p, name, true, func(s *space, g *group) error {
		if gs := g.snap(snap); gs != nil {
			if gs.complete {
				return nil
			}
			g.removeSnap(s, gs)
		}
		gs, err := c.takeSnap(s, g, snap, g.images)
		if err != nil {
			return err
		}
		gs.complete, taken = true, true
		return nil
	})
	if err != nil {
		return rbd.GroupSnap{}, err
	}
	if taken {
		c.fault("SnapshotGroup:taken")
	}
	var out rbd.GroupSnap
	err = c.withGroup(ctx, p, name, false, func(s *space, g *group) error {
		gs := g.snap(snap)
		if gs == nil || !gs.complete {
			return fmt.Errorf("%w: group snapshot %s/%s@%s is incomplete or gone", rbd.ErrBusy, p.Name, name, snap)
		}
		out.Members = make([]rbd.GroupMember, 0, len(gs.members))
		for _, m := range gs.members {
			img := s.images[m.imageID]
			if img == nil {
				return fmt.Errorf("reading group snapshot %s/%s@%s: image id %s: %w", p.Name, name, snap, m.imageID, rbd.ErrNotFound)
			}
			out.Members = append(out.Members, rbd.GroupMember{Image: img.name, SnapID: m.snapID})
		}
		sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Image < out.Members[j].Image })
		return nil
	})
	return out, err
}

// takeSnap records the group snapshot name, incomplete, and takes the
// snapshots of the given images in it, all under one name as librbd does.
// Called with c.mu held.
func (c *Ceph) takeSnap(s *space, g *group, name string, imageIDs []string) (*groupSnap, error) {
	c.nextID++
	gs := &groupSnap{id: "gs" + strconv.FormatUint(c.nextID, 16), name: name}
	g.snaps = append(g.snaps, gs)
	for _, id := range imageIDs {
		img := s.images[id]
		if img == nil {
			return gs, fmt.Errorf("group snapshot %s@%s: image id %s: %w", g.name, name, id, rbd.ErrNotFound)
		}
		c.nextID++
		sn := img.snapshot(c.nextID, ".group."+g.id+"_"+gs.id, c.now())
		sn.group = gs.id
		img.snaps = append(img.snaps, sn)
		gs.members = append(gs.members, groupMember{imageID: id, snapID: c.nextID})
	}
	return gs, nil
}

func (g *group) snap(name string) *groupSnap {
	for _, gs := range g.snaps {
		if gs.name == name {
			return gs
		}
	}
	return nil
}

// removeSnap removes a group snapshot: each image snapshot it took goes,
// or moves to the trash namespace while clones need it. Called with c.mu
// held.
func (g *group) removeSnap(s *space, gs *groupSnap) {
	for _, m := range gs.members {
		if img := s.images[m.imageID]; img != nil {
			if sn := img.liveSnap(m.snapID); sn != nil && sn.group == gs.id {
				img.release(sn)
			}
		}
	}
	g.snaps = slices.DeleteFunc(g.snaps, func(x *groupSnap) bool { return x == gs })
}

// RemoveGroup takes the images out of the group, removes its snapshots
// and then the group, each step under the lock of its own, with the fault
// points "RemoveGroup:ungrouped" and "RemoveGroup:unsnapped" between them
// as in the real backend. A missing group is fine.
func (c *Ceph) RemoveGroup(ctx context.Context, p rbd.Pool, name string) error {
	steps := []struct {
		fn    func(*space, *group)
		after string
	}{
		{func(s *space, g *group) {
			for _, id := range g.images {
				if img := s.images[id]; img != nil && img.group == g {
					img.group = nil
				}
			}
			g.images = nil
		}, "RemoveGroup:ungrouped"},
		{func(s *space, g *group) {
			for len(g.snaps) > 0 {
				g.removeSnap(s, g.snaps[0])
			}
		}, "RemoveGroup:unsnapped"},
		{func(s *space, g *group) { delete(s.groups, g.name) }, ""},
	}
	for _, st := range steps {
		err := c.withGroup(ctx, p, name, false, func(s *space, g *group) error {
			st.fn(s, g)
			return nil
		})
		if errors.Is(err, rbd.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.after != "" {
			c.fault(st.after)
		}
	}
	return nil
}

// ListGroups returns the pool's group names, sorted.
func (c *Ceph) ListGroups(ctx context.Context, p rbd.Pool) ([]string, error) {
	if c.groupSnaps != nil {
		return nil, c.groupSnaps
	}
	var names []string
	err := c.withSpace(ctx, p, false, func(s *space) { names = slices.Sorted(maps.Keys(s.groups)) })
	return names, err
}
