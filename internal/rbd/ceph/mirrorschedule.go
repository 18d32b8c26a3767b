package ceph

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd/admin"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Mirror snapshot schedules live in the mgr's rbd_support module, keyed
// by the image's ID: a copy on another site has schedules of its own.

// imageLevel is the rbd_support level spec of one image, and the name
// its schedule list shows for it.
func imageLevel(p rbd.Pool, image string) (admin.LevelSpec, string) {
	name := p.Name + "/" + image
	if p.Namespace != "" {
		name = p.Name + "/" + p.Namespace + "/" + image
	}
	return admin.NewLevelSpec(p.Name, p.Namespace, image), name
}

// scheduleErr classifies a schedule command's error. The mgr loads its
// modules after it starts, and until rbd_support is loaded it answers
// "No handler found" (EINVAL): that is a state to wait out, not a bad
// argument.
func scheduleErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "No handler found") {
		return fmt.Errorf("%w: the mgr's rbd_support module is not loaded (yet): %v", rbd.ErrUnavailable, err)
	}
	return classify(err)
}

// withSchedules runs fn on the mgr's schedule interface; a refusal names
// the mgr caps the user needs.
func (b *Backend) withSchedules(ctx context.Context, p rbd.Pool, op string, fn func(*admin.MirrorSnashotScheduleAdmin) error) error {
	err := b.withConn(ctx, p.MonHost, p.Cred, op, func(conn *rados.Conn) error {
		return fn(admin.NewFromConn(conn).MirrorSnashotSchedule())
	})
	return rbd.RefusedAt(p.Cred, cluster.CapMgr(p.Name), err)
}

// MirrorSchedules lists the image's own schedules.
func (b *Backend) MirrorSchedules(ctx context.Context, p rbd.Pool, image string) ([]rbd.MirrorSchedule, error) {
	var out []rbd.MirrorSchedule
	err := b.withSchedules(ctx, p, "MirrorSchedules", func(s *admin.MirrorSnashotScheduleAdmin) error {
		level, name := imageLevel(p, image)
		list, err := s.List(level)
		if err != nil {
			return fmt.Errorf("mirror snapshot schedules of %s: %w", name, scheduleErr(err))
		}
		for _, l := range list {
			if l.Name != name {
				continue
			}
			for _, t := range l.Schedule {
				out = append(out, rbd.MirrorSchedule{Interval: string(t.Interval), StartTime: string(t.StartTime)})
			}
		}
		return nil
	})
	return out, err
}

// AddMirrorSchedule adds a schedule for the image.
func (b *Backend) AddMirrorSchedule(ctx context.Context, p rbd.Pool, image string, sched rbd.MirrorSchedule) error {
	if err := sched.Validate(); err != nil {
		return err
	}
	return b.withSchedules(ctx, p, "AddMirrorSchedule", func(s *admin.MirrorSnashotScheduleAdmin) error {
		level, name := imageLevel(p, image)
		if err := s.Add(level, admin.Interval(sched.Interval), admin.StartTime(sched.StartTime)); err != nil {
			return fmt.Errorf("adding mirror snapshot schedule %s of %s: %w", sched, name, scheduleErr(err))
		}
		return nil
	})
}

// RemoveMirrorSchedule removes a schedule of the image; a missing one is
// fine.
func (b *Backend) RemoveMirrorSchedule(ctx context.Context, p rbd.Pool, image string, sched rbd.MirrorSchedule) error {
	return b.withSchedules(ctx, p, "RemoveMirrorSchedule", func(s *admin.MirrorSnashotScheduleAdmin) error {
		level, name := imageLevel(p, image)
		err := scheduleErr(s.Remove(level, admin.Interval(sched.Interval), admin.StartTime(sched.StartTime)))
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return fmt.Errorf("removing mirror snapshot schedule %s of %s: %w", sched, name, err)
		}
		return nil
	})
}
