package snapmeta

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// snapshot is a snapshot found, and where its data is read: a snapshot of
// its volume's image, by name (the user snapshots CreateSnapshot takes),
// or by ID: a group snapshot's member is a clone of its volume's image
// snapshot in the group namespace, which is read there, so that a delta
// between members, or between a member and a snapshot of the volume, is
// one diff of the volume's image.
type snapshot struct {
	id   volid.Snapshot
	pool rbd.Pool
	// image is the RBD image ID the data is read from, at the snapshot
	// named snap, or, when snapID is set, at that ID (snap then names it
	// in messages).
	image  string
	snap   string
	snapID uint64
	// order is the RBD snapshot ID on image: IDs grow with each snapshot
	// of an image, whatever its namespace.
	order uint64
	size  uint64
	// skip is where the user's device starts in the image: the LUKS
	// header's size for an encrypted volume, else 0.
	skip uint64
}

// find finds the snapshot id (what names it in messages), NotFound when
// it or its image is gone.
func (s *Server) find(ctx context.Context, id string, secrets map[string]string, what string) (snapshot, error) {
	snap, err := volid.DecodeSnapshot(id)
	if err != nil {
		return snapshot{}, status.Errorf(codes.NotFound, "%s %.130q does not exist", what, id)
	}
	pool, err := s.o.Pool(snap.ClusterID, snap.Pool, secrets)
	if err != nil {
		return snapshot{}, err
	}
	fam, err := s.o.Backend.StatFamily(ctx, pool, "", snap.ImageID)
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return snapshot{}, status.Errorf(codes.NotFound, "%s %s does not exist", what, snap)
	}
	if err != nil {
		return snapshot{}, cephStatus(err)
	}
	i := snapIndex(fam.Snaps, snap.Snap)
	if i < 0 {
		return snapshot{}, status.Errorf(codes.NotFound, "%s %s does not exist", what, snap)
	}
	found := snapshot{id: snap, pool: pool, image: snap.ImageID, snap: snap.Snap, order: fam.Snaps[i].ID, size: fam.Snaps[i].Size}
	vol := s.o.Names.Volume(fam.Name, fam.Metadata)
	if vol.GroupSnapshot != "" {
		// A member is never written: its clone's data is its parent's.
		p := fam.Parent
		if p == nil || p.Pool != pool.Name || p.SnapID == 0 {
			return snapshot{}, status.Errorf(codes.Internal, "%s %s is of group snapshot %s, and its image is not a clone of a snapshot in its pool (parent %+v)", what, snap, vol.GroupSnapshot, p)
		}
		found.image, found.snap, found.snapID, found.order = p.ImageID, p.Snap, p.SnapID, p.SnapID
	}
	// An encrypted volume's image holds the LUKS header before the user's
	// data: the device the user (and a backup) reads starts at
	// luks.DataOffset of the image. A member keeps its volume's key record.
	if vol.Encrypted() {
		found.skip = luks.DataOffset
	}
	return found, nil
}

// spec is the Diff of [off, off+length) of the snapshot, from base when
// base is set, limit extents at most.
func (sn snapshot) spec(base *snapshot, off, length uint64, limit int) rbd.DiffSpec {
	d := rbd.DiffSpec{ImageID: sn.image, Snap: sn.snap, SnapID: sn.snapID, Offset: off, Length: length, Limit: limit}
	if base != nil {
		if base.snapID != 0 {
			d.BaseID = base.snapID
		} else {
			d.Base = base.snap
		}
	}
	return d
}

// snapIndex is the index of the snapshot named name, or -1.
func snapIndex(snaps []rbd.SnapInfo, name string) int {
	for i, sn := range snaps {
		if sn.Name == name {
			return i
		}
	}
	return -1
}

// userExtents turns image extents into extents of the user's device:
// what lies in the first skip bytes (the LUKS header) is not the user's.
func userExtents(exts []rbd.Extent, skip uint64) []rbd.Extent {
	if skip == 0 {
		return exts
	}
	out := exts[:0]
	for _, e := range exts {
		if e.End() <= skip {
			continue
		}
		if e.Offset < skip {
			e.Length, e.Offset = e.End()-skip, skip
		}
		e.Offset -= skip
		out = append(out, e)
	}
	return out
}
