package fake

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// mirror is an image's mirroring state. The fake has one site: what the
// peer and its rbd-mirror would do is made with the hooks in
// mirrorhooks.go (MakeNonPrimary, SetMirrorStatus).
type mirror struct {
	globalID string
	primary  bool
	// demoted: the last mirror snapshot is a demotion, taken here or
	// arrived from the peer, so a promote needs no force (librbd's
	// "orphan" copy); demotedHere: taken here.
	demoted, demotedHere bool
	// primarySince is when a primary copy became primary.
	primarySince time.Time
	// snaps are the IDs of the mirror snapshots, in no user count.
	snaps  []uint64
	resync bool
	// syncing: the peer's rbd-mirror is writing a sync into this copy
	// (SetMirrorSyncing); a promote is refused meanwhile.
	syncing bool
	status  rbd.MirrorStatus
}

// enabled reports the image's mirroring as MirrorInfo.
func (img *image) mirrorInfo() rbd.MirrorInfo {
	if img.mirror == nil {
		return rbd.MirrorInfo{State: rbd.MirrorDisabled}
	}
	info := rbd.MirrorInfo{State: rbd.MirrorEnabled, Mode: rbd.MirrorModeSnapshot, Primary: img.mirror.primary, GlobalID: img.mirror.globalID,
		DemotedHere: img.mirror.demotedHere, ResyncRequested: img.mirror.resync}
	if info.Primary {
		info.PrimarySince = img.mirror.primarySince
	}
	return info
}

// mirrorSnap takes a mirror snapshot. Called with c.mu held.
func (c *Ceph) mirrorSnap(img *image) uint64 {
	c.nextID++
	img.mirror.snaps = append(img.mirror.snaps, c.nextID)
	return c.nextID
}

// withMirrored runs fn on a named image whose mirroring is enabled; one
// not mirrored is ErrNotMirrored.
func (c *Ceph) withMirrored(ctx context.Context, p rbd.Pool, name string, fn func(*image) error) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		if img.mirror == nil {
			return fmt.Errorf("%w: image %s/%s", rbd.ErrNotMirrored, p.Name, name)
		}
		return fn(img)
	})
}

// EnableMirroring enables snapshot mirroring in a pool in image mode and
// takes the first mirror snapshot.
func (c *Ceph) EnableMirroring(ctx context.Context, p rbd.Pool, name string) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		if img.mirror != nil {
			return nil
		}
		if mode := c.pools[p.Name].mirrorMode; mode != "image" {
			return fmt.Errorf("%w: pool %s mirrors in mode %q, not one image at a time", rbd.ErrNotMirrored, p.Name, cmp.Or(mode, "disabled"))
		}
		if img.parent != nil {
			if parent, _ := c.parentOf(img.parent); parent == nil || parent.mirror == nil {
				return fmt.Errorf("%w: enabling mirroring of image %s/%s: its parent is not mirrored", rbd.ErrInvalid, p.Name, name)
			}
		}
		c.nextID++
		img.mirror = &mirror{globalID: "fake-global-" + strconv.FormatUint(c.nextID, 16), primary: true, primarySince: c.now()}
		c.mirrorSnap(img)
		return nil
	})
}

// DisableMirroring disables mirroring of a primary copy, dropping its
// mirror snapshots.
func (c *Ceph) DisableMirroring(ctx context.Context, p rbd.Pool, name string) error {
	return c.withImage(ctx, p, name, true, func(_ *space, img *image) error {
		switch {
		case img.mirror == nil:
			return nil
		case !img.mirror.primary:
			return fmt.Errorf("%w: image %s/%s is a non-primary mirror copy", rbd.ErrInvalid, p.Name, name)
		}
		img.mirror = nil
		return nil
	})
}

// PromoteImage promotes a non-primary copy: without force only an orphan
// one (demoted here, or the peer's demotion arrived).
func (c *Ceph) PromoteImage(ctx context.Context, p rbd.Pool, name string, force bool) error {
	return c.withMirrored(ctx, p, name, func(img *image) error {
		switch {
		case img.mirror.primary:
			return nil
		case img.mirror.syncing:
			return fmt.Errorf("%w: %w: promoting image %s/%s", rbd.ErrBusy, rbd.ErrSyncRunning, p.Name, name)
		case !force && !img.mirror.demoted:
			return fmt.Errorf("%w: promoting image %s/%s: the peer's copy is still primary, or its demotion has not arrived here yet", rbd.ErrBusy, p.Name, name)
		}
		img.mirror.primary, img.mirror.demoted, img.mirror.demotedHere, img.mirror.resync = true, false, false, false
		img.mirror.primarySince = c.now()
		c.mirrorSnap(img)
		return nil
	})
}

// DemoteImage demotes a primary copy with a last mirror snapshot.
func (c *Ceph) DemoteImage(ctx context.Context, p rbd.Pool, name string) error {
	return c.withMirrored(ctx, p, name, func(img *image) error {
		if !img.mirror.primary {
			return nil
		}
		img.mirror.primary, img.mirror.demoted, img.mirror.demotedHere = false, true, true
		c.mirrorSnap(img)
		return nil
	})
}

// ResyncImage flags a non-primary copy (ResyncRequested tells).
func (c *Ceph) ResyncImage(ctx context.Context, p rbd.Pool, name string) error {
	return c.withMirrored(ctx, p, name, func(img *image) error {
		if img.mirror.primary {
			return fmt.Errorf("%w: image %s/%s is the primary copy", rbd.ErrInvalid, p.Name, name)
		}
		img.mirror.resync = true
		return nil
	})
}

// MirrorSnapshot takes a mirror snapshot of a primary copy.
func (c *Ceph) MirrorSnapshot(ctx context.Context, p rbd.Pool, name string) (uint64, error) {
	var id uint64
	err := c.withMirrored(ctx, p, name, func(img *image) error {
		if !img.mirror.primary {
			return fmt.Errorf("%w: image %s/%s is a non-primary copy", rbd.ErrInvalid, p.Name, name)
		}
		if !c.pools[p.Name].peered {
			return fmt.Errorf("%w: pool %s has no mirror peer to send snapshots to", rbd.ErrNotMirrored, p.Name)
		}
		id = c.mirrorSnap(img)
		return nil
	})
	return id, err
}

// MirrorInfo reads the image's mirroring.
func (c *Ceph) MirrorInfo(ctx context.Context, p rbd.Pool, name string) (rbd.MirrorInfo, error) {
	var info rbd.MirrorInfo
	err := c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		info = img.mirrorInfo()
		return nil
	})
	return info, err
}

// MirrorStatus returns what SetMirrorStatus set: with no rbd-mirror, the
// zero status (a local site never reported on), as a real cluster gives.
func (c *Ceph) MirrorStatus(ctx context.Context, p rbd.Pool, name string) (rbd.MirrorStatus, error) {
	var st rbd.MirrorStatus
	err := c.withMirrored(ctx, p, name, func(img *image) error {
		st = img.mirror.status
		st.Peers = slices.Clone(st.Peers)
		if st.Local.State == "" {
			st.Local = rbd.MirrorSiteStatus{State: rbd.SiteUnknown, Description: "status not found"}
		}
		return nil
	})
	return st, err
}

// scheduleKey keys an image's schedules by its ID, as the mgr does.
func scheduleKey(p rbd.Pool, img *image) string { return p.Name + "/" + p.Namespace + "/" + img.id }

// MirrorSchedules lists the image's schedules.
func (c *Ceph) MirrorSchedules(ctx context.Context, p rbd.Pool, name string) ([]rbd.MirrorSchedule, error) {
	var out []rbd.MirrorSchedule
	err := c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		out = slices.Clone(c.schedules[scheduleKey(p, img)])
		return nil
	})
	return out, err
}

// AddMirrorSchedule adds a schedule; an equal one is kept once.
func (c *Ceph) AddMirrorSchedule(ctx context.Context, p rbd.Pool, name string, s rbd.MirrorSchedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		k, s := scheduleKey(p, img), s.Normal()
		if !slices.Contains(c.schedules[k], s) {
			c.schedules[k] = append(c.schedules[k], s)
		}
		return nil
	})
}

// RemoveMirrorSchedule removes a schedule; a missing one is fine.
func (c *Ceph) RemoveMirrorSchedule(ctx context.Context, p rbd.Pool, name string, s rbd.MirrorSchedule) error {
	return c.withImage(ctx, p, name, false, func(_ *space, img *image) error {
		k := scheduleKey(p, img)
		c.schedules[k] = slices.DeleteFunc(c.schedules[k], func(o rbd.MirrorSchedule) bool { return o == s.Normal() })
		if len(c.schedules[k]) == 0 {
			delete(c.schedules, k)
		}
		return nil
	})
}
