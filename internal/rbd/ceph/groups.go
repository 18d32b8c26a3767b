package ceph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// GroupSnapshots is nil when the linked librbd clones by snapshot ID and
// reads a group snapshot's image snapshots (Squid 19 or newer), else
// rbd.ErrNotSupported naming the call it lacks. NewBackend learns it once.
func (b *Backend) GroupSnapshots() error { return b.groupSnaps }

// CreateGroup makes an empty RBD group; a taken name is rbd.ErrExists.
func (b *Backend) CreateGroup(ctx context.Context, p rbd.Pool, group string) error {
	if b.groupSnaps != nil {
		return b.groupSnaps
	}
	return b.withIoctx(ctx, p, "CreateGroup", func(ioctx *rados.IOContext) error {
		if err := librbd.GroupCreate(ioctx, group); err != nil {
			return inMissingNamespace(ioctx, p, fmt.Errorf("creating group %s/%s: %w", p.Name, group, classify(err)))
		}
		return nil
	})
}

// AddToGroup adds an image of the group's pool to it. An image the group
// already holds is left as it is; librbd refuses one that is in another
// group (EEXIST), and the error names that group.
func (b *Backend) AddToGroup(ctx context.Context, p rbd.Pool, group, image string) error {
	if b.groupSnaps != nil {
		return b.groupSnaps
	}
	return b.withIoctx(ctx, p, "AddToGroup", func(ioctx *rados.IOContext) error {
		members, err := librbd.GroupImageList(ioctx, group)
		if err != nil {
			return fmt.Errorf("images of group %s/%s: %w", p.Name, group, classify(err))
		}
		for _, m := range members {
			// An incomplete one is an add cut short: adding again ends it.
			if m.Name == image && m.PoolID == ioctx.GetPoolID() && m.State == librbd.GroupImageStateAttached {
				return nil
			}
		}
		err = classify(librbd.GroupImageAdd(ioctx, group, ioctx, image))
		if errors.Is(err, rbd.ErrExists) {
			err = fmt.Errorf("%w (%s)", err, groupOf(ioctx, image))
		}
		if err != nil {
			return fmt.Errorf("adding image %s/%s to group %s: %w", p.Name, image, group, err)
		}
		return nil
	})
}

// groupOf says which group an image is in, for an error message.
func groupOf(ioctx *rados.IOContext, image string) string {
	img, err := librbd.OpenImageReadOnly(ioctx, image, librbd.NoSnapshot)
	if err != nil {
		return "its group unknown: " + err.Error()
	}
	defer img.Close()
	g, err := img.GetGroup()
	switch {
	case err != nil:
		return "its group unknown: " + err.Error()
	case g.Name == "":
		return "in no group now"
	case g.PoolID != ioctx.GetPoolID():
		return fmt.Sprintf("in group %s of pool id %d", g.Name, g.PoolID)
	}
	return "in group " + g.Name
}

// SnapshotGroup takes the group snapshot snap, or returns the complete one
// of that name. An incomplete one (its taker crashed, or librbd could not
// undo a failed attempt) is removed and taken again.
func (b *Backend) SnapshotGroup(ctx context.Context, p rbd.Pool, group, snap string) (rbd.GroupSnap, error) {
	if b.groupSnaps != nil {
		return rbd.GroupSnap{}, b.groupSnaps
	}
	var gs rbd.GroupSnap
	err := b.withIoctx(ctx, p, "SnapshotGroup", func(ioctx *rados.IOContext) error {
		snaps, err := librbd.GroupSnapList(ioctx, group)
		if err != nil {
			return fmt.Errorf("snapshots of group %s/%s: %w", p.Name, group, classify(err))
		}
		for _, s := range snaps {
			if s.Name != snap {
				continue
			}
			if s.State == librbd.GroupSnapStateComplete {
				gs, err = groupSnapMembers(ioctx, p, group, snap)
				return err
			}
			if err := classify(librbd.GroupSnapRemove(ioctx, group, snap)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return fmt.Errorf("removing incomplete group snapshot %s/%s@%s: %w", p.Name, group, snap, err)
			}
		}
		if err := librbd.GroupSnapCreate(ioctx, group, snap); err != nil {
			return fmt.Errorf("group snapshot %s/%s@%s: %w", p.Name, group, snap, classify(err))
		}
		b.fault("SnapshotGroup:taken")
		gs, err = groupSnapMembers(ioctx, p, group, snap)
		return err
	})
	return gs, err
}

// groupSnapMembers reads a complete group snapshot's image snapshots,
// sorted by image. The images are in the group's pool and namespace.
func groupSnapMembers(ioctx *rados.IOContext, p rbd.Pool, group, snap string) (rbd.GroupSnap, error) {
	info, err := librbd.GroupSnapGetInfo(ioctx, group, snap)
	if err != nil {
		return rbd.GroupSnap{}, fmt.Errorf("reading group snapshot %s/%s@%s: %w", p.Name, group, snap, classify(err))
	}
	if info.State != librbd.GroupSnapStateComplete {
		return rbd.GroupSnap{}, fmt.Errorf("%w: group snapshot %s/%s@%s is incomplete (being taken or removed)", rbd.ErrBusy, p.Name, group, snap)
	}
	gs := rbd.GroupSnap{Members: make([]rbd.GroupMember, 0, len(info.Snapshots))}
	for _, s := range info.Snapshots {
		gs.Members = append(gs.Members, rbd.GroupMember{Image: s.Name, SnapID: s.SnapID})
	}
	sort.Slice(gs.Members, func(i, j int) bool { return gs.Members[i].Image < gs.Members[j].Image })
	return gs, nil
}

// RemoveGroup takes the images out of the group, then removes its
// snapshots (an image snapshot that clones still need moves to the trash
// namespace) and last the group itself. Each step is done again by a
// retry after a crash; a missing group is fine.
func (b *Backend) RemoveGroup(ctx context.Context, p rbd.Pool, group string) error {
	if b.groupSnaps != nil {
		return b.groupSnaps
	}
	return b.withIoctx(ctx, p, "RemoveGroup", func(ioctx *rados.IOContext) error {
		groups, err := librbd.GroupList(ioctx)
		if err != nil {
			return fmt.Errorf("listing groups of pool %s: %w", p.Name, classify(err))
		}
		if !slices.Contains(groups, group) {
			return nil
		}
		members, err := librbd.GroupImageList(ioctx, group)
		if err != nil {
			return fmt.Errorf("images of group %s/%s: %w", p.Name, group, classify(err))
		}
		for _, m := range members {
			if err := classify(librbd.GroupImageRemove(ioctx, group, ioctx, m.Name)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return fmt.Errorf("removing image %s/%s from group %s: %w", p.Name, m.Name, group, err)
			}
		}
		b.fault("RemoveGroup:ungrouped")
		snaps, err := librbd.GroupSnapList(ioctx, group)
		if err != nil {
			return fmt.Errorf("snapshots of group %s/%s: %w", p.Name, group, classify(err))
		}
		for _, s := range snaps {
			if err := classify(librbd.GroupSnapRemove(ioctx, group, s.Name)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return fmt.Errorf("removing group snapshot %s/%s@%s: %w", p.Name, group, s.Name, err)
			}
		}
		b.fault("RemoveGroup:unsnapped")
		if err := classify(librbd.GroupRemove(ioctx, group)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return fmt.Errorf("removing group %s/%s: %w", p.Name, group, err)
		}
		return nil
	})
}

// ListGroups returns the names of the pool's groups, sorted.
func (b *Backend) ListGroups(ctx context.Context, p rbd.Pool) ([]string, error) {
	if b.groupSnaps != nil {
		return nil, b.groupSnaps
	}
	var names []string
	err := b.withIoctx(ctx, p, "ListGroups", func(ioctx *rados.IOContext) error {
		var err error
		if names, err = librbd.GroupList(ioctx); err != nil {
			return fmt.Errorf("listing groups of pool %s: %w", p.Name, classify(err))
		}
		sort.Strings(names)
		return nil
	})
	return names, err
}

// cloneParent makes the clone of spec's parent snapshot: by ID when
// spec.ParentSnapID is set (rbd_clone4, which reaches snapshots outside
// the user namespace), else by name.
func cloneParent(pio *rados.IOContext, spec rbd.CloneSpec, cio *rados.IOContext, name string, opts *librbd.ImageOptions) error {
	if spec.ParentSnapID != 0 {
		return librbd.CloneImageByID(pio, spec.ParentImage, spec.ParentSnapID, cio, name, opts)
	}
	return librbd.CloneImage(pio, spec.ParentImage, spec.ParentSnap, cio, name, opts)
}

// parentSnapRef names spec's parent snapshot in messages: image@snap, or
// image@#id (as rbd --snap-id) for one named by ID.
func parentSnapRef(spec rbd.CloneSpec) string {
	if spec.ParentSnapID != 0 {
		return spec.ParentImage + "@#" + strconv.FormatUint(spec.ParentSnapID, 10)
	}
	return spec.ParentImage + "@" + spec.ParentSnap
}
