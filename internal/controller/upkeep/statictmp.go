package upkeep

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// staticTmpStep drops the settled temporary snapshots that clones took of
// static volumes' images, which the sweep's own part does not read (the
// index records.NewStaticTmps lists them), and the entries of images left
// with none.
func staticTmpStep(s *sweeper) Step {
	return Step{What: "static images' temporary snapshots", Sweep: s.sweepStaticTmp}
}

func (s *sweeper) sweepStaticTmp(ctx context.Context, pool rbd.Pool) error {
	entries, err := s.staticTmps.List(ctx, pool)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.At.IsZero() && !s.settled(e.At) {
			continue
		}
		if err := s.sweepStaticImage(ctx, pool, e.Key); err != nil {
			klog.ErrorS(err, "sweeping the temporary snapshots of a static image", "pool", pool.Name, "image", e.Key)
		}
	}
	return nil
}

func (s *sweeper) sweepStaticImage(ctx context.Context, pool rbd.Pool, image string) error {
	release, ok := s.locks.TryLock(records.ImageLock(pool, image))
	if !ok {
		return nil // a clone from it is running
	}
	defer release()
	fam, err := s.backend.StatFamily(ctx, pool, image, "")
	if err == nil {
		releaseParent, ok := s.locks.TryLock(records.ParentLock(pool.Name, fam.ID))
		if !ok {
			return nil
		}
		defer releaseParent()
		left, err := s.dropSettledTmp(ctx, pool, fam)
		if err != nil || left {
			return err
		}
	} else if !errors.Is(err, rbd.ErrNotFound) {
		return err
	}
	return s.staticTmps.Drop(ctx, pool, image)
}
