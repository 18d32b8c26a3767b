package ceph

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// StatFamily reads an image's snapshots, parent and watchers. The image is
// named by name, or by RBD image ID when name is empty.
func (b *Backend) StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error) {
	var f rbd.Family
	err := b.withIoctx(ctx, p, "StatFamily", func(ioctx *rados.IOContext) error {
		img, err := openRO(ioctx, name, id)
		if err != nil {
			return err
		}
		defer img.Close()
		if name == "" {
			if name, err = nameByID(ioctx, id); err != nil {
				return err
			}
		}
		f.Name = name
		if f.Size, err = img.GetSize(); err != nil {
			return fmt.Errorf("size of image %s: %w", name, classify(err))
		}
		if f.ID, err = img.GetId(); err != nil {
			return fmt.Errorf("id of image %s: %w", name, classify(err))
		}
		if f.Metadata, err = img.ListMetadata(); err != nil {
			return fmt.Errorf("metadata of image %s: %w", name, classify(err))
		}
		if f.Features, err = features(img, name); err != nil {
			return err
		}
		created, err := img.GetCreateTimestamp()
		if err != nil {
			return fmt.Errorf("creation time of image %s: %w", name, classify(err))
		}
		f.Created = time.Unix(created.Sec, created.Nsec)
		snaps, err := img.GetSnapshotNames()
		if err != nil {
			return fmt.Errorf("snapshots of image %s: %w", name, classify(err))
		}
		mirrored := false
		for _, s := range snaps {
			ns, err := img.GetSnapNamespaceType(s.Id)
			if err != nil {
				return fmt.Errorf("snapshot namespace of %s@%s: %w", name, s.Name, classify(err))
			}
			if ns == snapNamespaceMirror {
				// librbd takes and drops them itself; every mirrored
				// copy has one from its first sync on, so only a
				// mirrored image pays for reading its mirror info.
				mirrored = true
				continue
			}
			if ns != librbd.SnapNamespaceTypeUser {
				// A group snapshot's image snapshot counts while its
				// group snapshot lives: it is no user snapshot, and it
				// blocks the image's removal (ENOTEMPTY) as a needed
				// trashed one does.
				if ns != librbd.SnapNamespaceTypeTrash || trashedSnapNeeded(ioctx, f.ID, s.Id) {
					f.TrashedSnaps++
				}
				continue
			}
			ts, err := img.GetSnapTimestamp(s.Id)
			if err != nil {
				return fmt.Errorf("snapshot time of %s@%s: %w", name, s.Name, classify(err))
			}
			f.Snaps = append(f.Snaps, rbd.SnapInfo{Name: s.Name, ID: s.Id, Size: s.Size, Created: time.Unix(ts.Sec, ts.Nsec)})
		}
		if mirrored {
			mi, err := mirrorInfo(img, name)
			if err != nil {
				return err
			}
			if mi.State != rbd.MirrorDisabled {
				f.Mirror = &mi
			}
		}
		parent, err := img.GetParent()
		switch {
		case err == nil:
			f.Parent = &rbd.Parent{Pool: parent.Image.PoolName, Image: parent.Image.ImageName, ImageID: parent.Image.ImageID,
				Snap: parent.Snap.SnapName, SnapID: parent.Snap.ID, Trash: parent.Image.Trash}
		case !errors.Is(classify(err), rbd.ErrNotFound):
			return fmt.Errorf("parent of image %s: %w", name, classify(err))
		}
		watchers, err := img.ListWatchers()
		if err != nil {
			return fmt.Errorf("watchers of image %s: %w", name, classify(err))
		}
		f.Watchers = len(watchers)
		return nil
	})
	return f, err
}

// trashedSnapNeeded reports whether a snapshot in the trash namespace still
// has clones. When they cannot be listed (a clone in a pool these
// credentials cannot read) it is taken as needed: kept data is safer than
// lost data.
func trashedSnapNeeded(ioctx *rados.IOContext, imageID string, snapID uint64) bool {
	img, err := librbd.OpenImageByIdReadOnly(ioctx, imageID, librbd.NoSnapshot)
	if err != nil {
		return true
	}
	defer img.Close()
	if err := img.SetSnapByID(snapID); err != nil {
		return true
	}
	children, err := img.ListChildrenAttributes()
	return err != nil || len(children) > 0
}

func openRO(ioctx *rados.IOContext, name, id string) (*librbd.Image, error) {
	var img *librbd.Image
	var err error
	if name != "" {
		img, err = librbd.OpenImageReadOnly(ioctx, name, librbd.NoSnapshot)
	} else {
		img, err = librbd.OpenImageByIdReadOnly(ioctx, id, librbd.NoSnapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("opening image %s%s: %w", name, id, classify(err))
	}
	return img, nil
}

// nameByID looks an image ID up in the pool's RBD directory, whose omap
// maps "id_<id>" to the length-prefixed image name (format 2 images).
// librbd's C API (Pacific) has no call for it, and clones need the
// parent's name.
func nameByID(ioctx *rados.IOContext, id string) (string, error) {
	vals, err := ioctx.GetOmapValues("rbd_directory", "", "id_"+id, 4)
	if err != nil {
		return "", fmt.Errorf("looking up image id %s: %w", id, classify(err))
	}
	v, ok := vals["id_"+id]
	if !ok || len(v) < 4 || int(binary.LittleEndian.Uint32(v)) != len(v)-4 {
		return "", fmt.Errorf("%w: image id %s is in no directory entry (in the trash?)", rbd.ErrNotFound, id)
	}
	return string(v[4:]), nil
}

// CreateSnapshot makes a snapshot; an existing one of that name is rbd.ErrExists.
func (b *Backend) CreateSnapshot(ctx context.Context, p rbd.Pool, image, snap string) error {
	return b.withIoctx(ctx, p, "CreateSnapshot", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, image, classify(err))
		}
		defer img.Close()
		if _, err := img.CreateSnapshot(snap); err != nil {
			return fmt.Errorf("snapshot %s/%s@%s: %w", p.Name, image, snap, classify(err))
		}
		return nil
	})
}

// RemoveSnapshot deletes a snapshot of the image with the given RBD ID. A
// snapshot that clones still depend on moves to the RBD trash namespace
// and disappears with its last clone (clone format 2).
func (b *Backend) RemoveSnapshot(ctx context.Context, p rbd.Pool, imageID, snap string) error {
	return b.withIoctx(ctx, p, "RemoveSnapshot", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImageById(ioctx, imageID, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image id %s: %w", imageID, classify(err))
		}
		defer img.Close()
		if err := img.GetSnapshot(snap).Remove(); err != nil {
			return fmt.Errorf("removing snapshot %s: %w", snap, classify(err))
		}
		return nil
	})
}

// Clone makes a format 2 clone (no snapshot protection needed) of the
// parent snapshot named by spec.ParentSnap, or by spec.ParentSnapID (a
// group snapshot's, which needs rbd_clone4), grows it to spec.Size if that
// is larger than the parent snapshot, and sets its metadata last, so a
// clone without metadata is unfinished.
func (b *Backend) Clone(ctx context.Context, parent, child rbd.Pool, name string, spec rbd.CloneSpec) error {
	if spec.ParentSnapID != 0 && b.groupSnaps != nil {
		return b.groupSnaps
	}
	return b.withIoctx(ctx, child, "Clone", func(cio *rados.IOContext) (err error) {
		// The parent's pool, or the data pool, may be the one refused.
		defer func() { err = rbd.RefusedOn(child, err, parent.Name, spec.DataPool) }()
		conn, release, err := b.conns.get(ctx, parent.MonHost, parent.Cred)
		if err != nil {
			return err
		}
		defer release()
		pio, err := openIoctx(conn, parent)
		if err != nil {
			return err
		}
		defer pio.Destroy()
		opts := librbd.NewRbdImageOptions()
		defer opts.Destroy()
		if err := opts.SetUint64(librbd.ImageOptionFeatures, uint64(librbd.FeatureSetFromNames(spec.Features))); err != nil {
			return fmt.Errorf("image features: %w", classify(err))
		}
		if err := opts.SetUint64(librbd.ImageOptionCloneFormat, 2); err != nil {
			return fmt.Errorf("clone format: %w", classify(err))
		}
		if spec.DataPool != "" {
			if err := opts.SetString(librbd.ImageOptionDataPool, spec.DataPool); err != nil {
				return fmt.Errorf("data pool: %w", classify(err))
			}
		}
		if err := cloneParent(pio, spec, cio, name, opts); err != nil {
			return fmt.Errorf("cloning %s/%s to %s/%s: %w", parent.Name, parentSnapRef(spec), child.Name, name, classify(err))
		}
		b.fault("Clone:cloned")
		img, err := librbd.OpenImage(cio, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening clone %s: %w", name, classify(err))
		}
		defer img.Close()
		size, err := img.GetSize()
		if err != nil {
			return fmt.Errorf("size of clone %s: %w", name, classify(err))
		}
		if spec.Size > size {
			if err := img.Resize(spec.Size); err != nil {
				return fmt.Errorf("growing clone %s: %w", name, classify(err))
			}
		}
		if len(spec.DropMetadataPrefixes) > 0 {
			inherited, err := img.ListMetadata()
			if err != nil {
				return fmt.Errorf("metadata of clone %s: %w", name, classify(err))
			}
			for k := range inherited {
				if spec.Drops(k) {
					if err := img.RemoveMetadata(k); err != nil {
						return fmt.Errorf("removing inherited metadata %s of clone %s: %w", k, name, classify(err))
					}
				}
			}
		}
		return writeMetadata(img, "clone "+name, spec.ImageSpec)
	})
}

// Flatten copies the parent's data into a clone so it stands alone.
func (b *Backend) Flatten(ctx context.Context, p rbd.Pool, name string) error {
	return b.withIoctx(ctx, p, "Flatten", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		if err := img.Flatten(); err != nil {
			return fmt.Errorf("flattening %s/%s: %w", p.Name, name, classify(err))
		}
		return nil
	})
}

// Rename renames an image.
func (b *Backend) Rename(ctx context.Context, p rbd.Pool, from, to string) error {
	return b.withIoctx(ctx, p, "Rename", func(ioctx *rados.IOContext) error {
		if err := librbd.GetImage(ioctx, from).Rename(to); err != nil {
			return fmt.Errorf("renaming %s/%s to %s: %w", p.Name, from, to, classify(err))
		}
		return nil
	})
}

// sparseSize is the smallest zero-filled extent Sparsify gives back: the
// rbd CLI's default, and the block size of the filesystems we make.
const sparseSize = 4096

// Sparsify deallocates the image's zero-filled extents (of whole objects
// and within them), as `rbd sparsify` does.
func (b *Backend) Sparsify(ctx context.Context, p rbd.Pool, name string) error {
	return b.withIoctx(ctx, p, "Sparsify", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		if err := img.Sparsify(sparseSize); err != nil {
			return fmt.Errorf("sparsifying %s/%s: %w", p.Name, name, classify(err))
		}
		return nil
	})
}
