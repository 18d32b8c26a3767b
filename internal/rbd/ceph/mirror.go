package ceph

/*
#include <rbd/librbd.h>
*/
import "C"

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// snapNamespaceMirror is RBD's mirror snapshot namespace, which go-ceph
// names no constant for.
const snapNamespaceMirror = librbd.SnapNamespaceType(C.RBD_SNAP_NAMESPACE_TYPE_MIRROR)

// withMirrored opens the image read-write, reads its mirror info and
// runs fn with both: every mirror call first learns what the image is.
func (b *Backend) withMirrored(ctx context.Context, p rbd.Pool, op, image string, fn func(*librbd.Image, rbd.MirrorInfo) error) error {
	return b.withMirroredIn(ctx, p, op, image, func(_ *rados.IOContext, img *librbd.Image, info rbd.MirrorInfo) error { return fn(img, info) })
}

// withMirroredIn is withMirrored with the pool's I/O context.
func (b *Backend) withMirroredIn(ctx context.Context, p rbd.Pool, op, image string, fn func(*rados.IOContext, *librbd.Image, rbd.MirrorInfo) error) error {
	return b.withIoctx(ctx, p, op, func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, image, classify(err))
		}
		defer img.Close()
		info, err := mirrorInfo(img, image)
		if err != nil {
			return err
		}
		return fn(ioctx, img, info)
	})
}

// mirrorInfo reads an open image's mirroring state, and its mode while
// enabled.
func mirrorInfo(img *librbd.Image, name string) (rbd.MirrorInfo, error) {
	mi, err := img.GetMirrorImageInfo()
	if err != nil {
		return rbd.MirrorInfo{}, fmt.Errorf("mirror info of image %s: %w", name, classify(err))
	}
	info := rbd.MirrorInfo{Primary: mi.Primary, GlobalID: mi.GlobalID}
	switch mi.State {
	case librbd.MirrorImageEnabled:
		info.State = rbd.MirrorEnabled
	case librbd.MirrorImageDisabling:
		info.State = rbd.MirrorDisabling
	default:
		info.State = rbd.MirrorDisabled
		return info, nil
	}
	mode, err := img.GetImageMirrorMode()
	if err != nil {
		return rbd.MirrorInfo{}, fmt.Errorf("mirror mode of image %s: %w", name, classify(err))
	}
	info.Mode = mode.String()
	if mode == librbd.ImageMirrorModeSnapshot {
		if err := mirrorSnapInfo(img, name, &info); err != nil {
			return rbd.MirrorInfo{}, err
		}
	}
	return info, nil
}

// Mirror snapshots are named by the site that takes them: librbd names
// the primary's ".mirror.primary.<global ID>.<uuid>" (its demotion's
// too) and rbd-mirror names the copy of one on a peer
// ".mirror.non_primary.<global ID>.<uuid>". go-ceph reads no snapshot's
// mirror namespace, so the name tells which.
const primarySnapPrefix = ".mirror.primary."

// mirrorMetaPrefix starts the image metadata key in which librbd flags
// a copy for resync: {"resync_requested": true}.
const mirrorMetaPrefix = ".rbd_mirror."

// resyncRequested reads the flag ResyncImage sets.
func resyncRequested(img *librbd.Image, name string) (bool, error) {
	meta, err := img.ListMetadata()
	if err != nil {
		return false, fmt.Errorf("metadata of image %s: %w", name, classify(err))
	}
	for k, v := range meta {
		var flag struct {
			ResyncRequested bool `json:"resync_requested"`
		}
		if strings.HasPrefix(k, mirrorMetaPrefix) && json.Unmarshal([]byte(v), &flag) == nil && flag.ResyncRequested {
			return true, nil
		}
	}
	return false, nil
}

// mirrorSnapInfo reads from the image's mirror snapshots, oldest first,
// what its mirror info says of them: a copy that is not primary is
// DemotedHere when the newest was taken here; a primary has been primary
// since the first one taken here after the newest copied from a peer.
func mirrorSnapInfo(img *librbd.Image, name string, info *rbd.MirrorInfo) error {
	snaps, err := img.GetSnapshotNames()
	if err != nil {
		return fmt.Errorf("snapshots of image %s: %w", name, classify(err))
	}
	var mirror []librbd.SnapInfo
	for _, s := range snaps {
		ns, err := img.GetSnapNamespaceType(s.Id)
		if err != nil {
			return fmt.Errorf("snapshot namespace of %s@%d: %w", name, s.Id, classify(err))
		}
		if ns == snapNamespaceMirror {
			mirror = append(mirror, s)
		}
	}
	if len(mirror) == 0 {
		return nil
	}
	slices.SortFunc(mirror, func(a, b librbd.SnapInfo) int { return cmp.Compare(a.Id, b.Id) })
	if !info.Primary {
		info.DemotedHere = strings.HasPrefix(mirror[len(mirror)-1].Name, primarySnapPrefix)
		info.ResyncRequested, err = resyncRequested(img, name)
		return err
	}
	first := 0
	for i, s := range mirror {
		if !strings.HasPrefix(s.Name, primarySnapPrefix) {
			first = i + 1
		}
	}
	if first == len(mirror) {
		return nil // promoted, its promotion's snapshot not listed yet
	}
	ts, err := img.GetSnapTimestamp(mirror[first].Id)
	if err != nil {
		return fmt.Errorf("time of mirror snapshot %d of %s: %w", mirror[first].Id, name, classify(err))
	}
	info.PrimarySince = time.Unix(ts.Sec, ts.Nsec)
	return nil
}

// notMirrored is ErrNotMirrored for an image whose info says so.
func notMirrored(p rbd.Pool, image string, info rbd.MirrorInfo) error {
	if info.State == rbd.MirrorDisabling {
		return fmt.Errorf("%w: mirroring of image %s/%s is being disabled", rbd.ErrBusy, p.Name, image)
	}
	return fmt.Errorf("%w: image %s/%s", rbd.ErrNotMirrored, p.Name, image)
}

// EnableMirroring turns snapshot-based mirroring on; the pool must mirror
// images one by one.
func (b *Backend) EnableMirroring(ctx context.Context, p rbd.Pool, image string) error {
	return b.withIoctx(ctx, p, "EnableMirroring", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, image, classify(err))
		}
		defer img.Close()
		info, err := mirrorInfo(img, image)
		switch {
		case err != nil:
			return err
		case info.State == rbd.MirrorEnabled && info.Mode == rbd.MirrorModeSnapshot:
			return nil
		case info.State == rbd.MirrorEnabled:
			return fmt.Errorf("%w: image %s/%s is mirrored in %s mode, not by snapshots", rbd.ErrInvalid, p.Name, image, info.Mode)
		case info.State == rbd.MirrorDisabling:
			return notMirrored(p, image, info)
		}
		mode, err := librbd.GetMirrorMode(ioctx)
		if err != nil {
			return fmt.Errorf("mirror mode of pool %s: %w", p.Name, classify(err))
		}
		if mode != librbd.MirrorModeImage {
			return fmt.Errorf("%w: pool %s mirrors in mode %q, not one image at a time", rbd.ErrNotMirrored, p.Name, mode)
		}
		if err := img.MirrorEnable(librbd.ImageMirrorModeSnapshot); err != nil {
			return fmt.Errorf("enabling mirroring of image %s/%s: %w", p.Name, image, classify(err))
		}
		return nil
	})
}

// DisableMirroring turns mirroring off on the primary copy.
func (b *Backend) DisableMirroring(ctx context.Context, p rbd.Pool, image string) error {
	return b.withMirrored(ctx, p, "DisableMirroring", image, func(img *librbd.Image, info rbd.MirrorInfo) error {
		switch {
		case info.State == rbd.MirrorDisabled:
			return nil
		case info.State == rbd.MirrorEnabled && !info.Primary:
			return fmt.Errorf("%w: image %s/%s is a non-primary mirror copy: turn mirroring off at its primary", rbd.ErrInvalid, p.Name, image)
		}
		if err := img.MirrorDisable(false); err != nil {
			return fmt.Errorf("disabling mirroring of image %s/%s: %w", p.Name, image, classify(err))
		}
		return nil
	})
}

// PromoteImage makes this copy primary.
func (b *Backend) PromoteImage(ctx context.Context, p rbd.Pool, image string, force bool) error {
	return b.withMirrored(ctx, p, "PromoteImage", image, func(img *librbd.Image, info rbd.MirrorInfo) error {
		switch {
		case !info.Enabled():
			return notMirrored(p, image, info)
		case info.Primary:
			return nil
		}
		err := img.MirrorPromote(force)
		if err == nil {
			return nil
		}
		switch errno(err) {
		case syscall.EBUSY:
			return fmt.Errorf("%w: promoting image %s/%s: the peer's copy is still primary, or its demotion has not arrived here yet: %w", rbd.ErrBusy, p.Name, image, err)
		case syscall.EROFS:
			// librbd cannot take the snapshot while rbd-mirror writes
			// a sync into the copy.
			return fmt.Errorf("%w: %w: promoting image %s/%s: %w", rbd.ErrBusy, rbd.ErrSyncRunning, p.Name, image, err)
		}
		return fmt.Errorf("promoting image %s/%s: %w", p.Name, image, classify(err))
	})
}

// DemoteImage makes the primary copy non-primary.
func (b *Backend) DemoteImage(ctx context.Context, p rbd.Pool, image string) error {
	return b.withMirrored(ctx, p, "DemoteImage", image, func(img *librbd.Image, info rbd.MirrorInfo) error {
		switch {
		case !info.Enabled():
			return notMirrored(p, image, info)
		case !info.Primary:
			return nil
		}
		if err := img.MirrorDemote(); err != nil {
			return fmt.Errorf("demoting image %s/%s: %w", p.Name, image, classify(err))
		}
		return nil
	})
}

// ResyncImage flags a non-primary copy for rbd-mirror to copy again.
func (b *Backend) ResyncImage(ctx context.Context, p rbd.Pool, image string) error {
	return b.withMirrored(ctx, p, "ResyncImage", image, func(img *librbd.Image, info rbd.MirrorInfo) error {
		switch {
		case !info.Enabled():
			return notMirrored(p, image, info)
		case info.Primary:
			return fmt.Errorf("%w: image %s/%s is the primary copy: there is nothing to copy it from", rbd.ErrInvalid, p.Name, image)
		}
		if err := img.MirrorResync(); err != nil {
			return fmt.Errorf("flagging image %s/%s for resync: %w", p.Name, image, classify(err))
		}
		return nil
	})
}

// MirrorSnapshot takes a mirror snapshot of the primary copy.
func (b *Backend) MirrorSnapshot(ctx context.Context, p rbd.Pool, image string) (uint64, error) {
	var id uint64
	err := b.withMirroredIn(ctx, p, "MirrorSnapshot", image, func(ioctx *rados.IOContext, img *librbd.Image, info rbd.MirrorInfo) error {
		switch {
		case !info.Enabled():
			return notMirrored(p, image, info)
		case !info.Primary:
			return fmt.Errorf("%w: image %s/%s is a non-primary copy: mirror snapshots are taken of the primary", rbd.ErrInvalid, p.Name, image)
		}
		var err error
		if id, err = img.CreateMirrorSnapshot(); err != nil {
			err = fmt.Errorf("mirror snapshot of image %s/%s: %w", p.Name, image, classify(err))
			if errno(err) == syscall.EINVAL && noPeers(ioctx) {
				return fmt.Errorf("%w: pool %s has no mirror peer to send snapshots to (rbd mirror pool peer bootstrap): %w", rbd.ErrNotMirrored, p.Name, err)
			}
			return err
		}
		return nil
	})
	return id, err
}

// noPeers reports whether the pool has no mirror peer, the one EINVAL of
// a mirror snapshot of a primary that the caller can act on.
func noPeers(ioctx *rados.IOContext) bool {
	peers, err := librbd.ListMirrorPeerSite(ioctx)
	return err == nil && len(peers) == 0
}

// MirrorInfo reads the image's mirroring state, opened read-only.
func (b *Backend) MirrorInfo(ctx context.Context, p rbd.Pool, image string) (rbd.MirrorInfo, error) {
	var info rbd.MirrorInfo
	err := b.withIoctx(ctx, p, "MirrorInfo", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImageReadOnly(ioctx, image, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, image, classify(err))
		}
		defer img.Close()
		info, err = mirrorInfo(img, image)
		return err
	})
	return info, err
}

// MirrorStatus reads the daemons' reports on the image, opened read-only.
func (b *Backend) MirrorStatus(ctx context.Context, p rbd.Pool, image string) (rbd.MirrorStatus, error) {
	var st rbd.MirrorStatus
	err := b.withIoctx(ctx, p, "MirrorStatus", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImageReadOnly(ioctx, image, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, image, classify(err))
		}
		defer img.Close()
		info, err := mirrorInfo(img, image)
		if err != nil {
			return err
		}
		if !info.Enabled() {
			return notMirrored(p, image, info)
		}
		gs, err := img.GetGlobalMirrorStatus()
		if err != nil {
			return fmt.Errorf("mirror status of image %s/%s: %w", p.Name, image, classify(err))
		}
		for _, s := range gs.SiteStatuses {
			site := rbd.MirrorSiteStatus{MirrorUUID: s.MirrorUUID, State: s.State.String(), Up: s.Up, Description: s.Description}
			if s.LastUpdate > 0 {
				site.LastUpdate = time.Unix(s.LastUpdate, 0)
			}
			if s.MirrorUUID == "" {
				st.Local = site
			} else {
				st.Peers = append(st.Peers, site)
			}
		}
		return nil
	})
	return st, err
}

// errno is the error number of a go-ceph error (positive), 0 for nil or
// another error.
func errno(err error) syscall.Errno {
	var e errnoer
	if err == nil || !errors.As(err, &e) {
		return 0
	}
	return syscall.Errno(-e.ErrorCode())
}
