package upkeep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// sweepTimeout bounds one pass over a pool.
const sweepTimeout = time.Hour

// A Step is one feature's part of the sweep of a pool: it finishes or
// undoes what that feature's crashed or abandoned requests left there, and
// leaves alone what is younger than one interval (sweeper.settled), which
// a request may still be working on.
type Step struct {
	// What names what the step sweeps, for errors and the log.
	What  string
	Sweep func(ctx context.Context, pool rbd.Pool) error
}

// sweeper finishes, off the request path, what a crashed or abandoned
// request left in a pool and no retry will come back for. Its own part
// reads the driver's images:
//   - hidden images (deleted volumes kept for their snapshots or clones)
//     that nothing needs any more, or whose removal was cut short;
//   - unfinished volume images (created, never given their name) of a
//     CreateVolume that was not retried;
//   - temporary snapshots of volume clones that were not retried;
//
// and the registered steps do the rest (snapshot claims, group
// snapshots, ...).
//
// A sweep runs after a delete in a pool, with that request's credentials,
// at most once per interval; a restarted controller sweeps at the first
// delete. With credentials of its own (--controller-secret-dir) the
// controller also sweeps, once per interval, every pool they can read, so
// a pool that sees no delete is swept too. What is younger than one
// interval is left alone: a request may still be working on it. Volume
// images found clean are not read again until a request touches them.
type sweeper struct {
	*env
	interval time.Duration
	tasks    *background // keyed by pool

	mu    sync.Mutex
	steps []Step
	last  map[string]time.Time // pool key -> start of its last sweep
	clean map[string]bool      // records.PoolImageKey: finished, no temporary snapshot
	gen   uint64               // counts touch calls, so a check that overlapped one is not cached
}

func newSweeper(e *env, interval time.Duration) *sweeper {
	return &sweeper{env: e, interval: interval, tasks: newBackground(),
		last: map[string]time.Time{}, clean: map[string]bool{}}
}

func (s *sweeper) stop() { s.tasks.stop() }

// register adds steps to every sweep from now on, after those registered
// before.
func (s *sweeper) register(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

// touch forgets that an image was found clean: a request is changing it.
func (s *sweeper) touch(p rbd.Pool, image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clean, records.PoolImageKey(p, image))
	s.gen++
}

func (s *sweeper) isClean(key string) (bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clean[key], s.gen
}

func (s *sweeper) markClean(key string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == gen {
		s.clean[key] = true
	}
}

// after starts a sweep of the pool unless one ran within the interval or
// is running.
func (s *sweeper) after(pool rbd.Pool) {
	if s.interval <= 0 {
		return
	}
	key := records.PoolKey(pool)
	s.mu.Lock()
	last, swept := s.last[key]
	due := !swept || time.Since(last) >= s.interval
	if due {
		s.last[key] = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	s.tasks.start(key, s.counted("sweep", sweepTimeout, func(ctx context.Context) {
		err := s.sweep(ctx, pool)
		if err != nil {
			klog.ErrorS(err, "sweeping the pool failed; the next sweep of the pool tries again", "pool", pool.Name)
		}
		s.o.Observer.Swept(err)
	}))
}

// periodicKey names the periodic task among the per-pool sweeps, whose
// keys hold a "/".
const periodicKey = "periodic"

// startPeriodic sweeps every pool the controller's own credentials can
// read, once per interval, starting one interval from now (a restarted
// controller also sweeps a pool at its first delete).
func (s *sweeper) startPeriodic() {
	if s.interval <= 0 || s.o.Credentials == nil {
		return
	}
	s.tasks.every(periodicKey, s.interval, s.sweepAll)
}

// sweepAll starts the sweep of every pool of every cluster that is due,
// and drops the node registry's expired fence records.
func (s *sweeper) sweepAll(ctx context.Context) {
	if s.o.Fences != nil {
		s.dropExpiredFences(ctx)
	}
	for _, cl := range s.o.Clusters.All() {
		pools, err := s.ownPools(ctx, cl)
		if err != nil {
			klog.ErrorS(err, "listing pools for the periodic sweep; trying again in one interval", "cluster", cl.ClusterID)
			continue
		}
		for _, pool := range pools {
			s.after(pool)
		}
	}
}

// sweep looks at every image of the pool the driver made, then runs the
// steps; a failed step does not keep the next from running.
func (s *sweeper) sweep(ctx context.Context, pool rbd.Pool) error {
	names, readable, err := s.ownImages(ctx, pool)
	if err != nil || !readable {
		return err
	}
	s.forgetGone(pool, names)
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		if id, ok := s.names.HiddenID(name); ok {
			err = s.sweepHidden(ctx, pool, name, id)
		} else {
			err = s.sweepVolume(ctx, pool, name)
		}
		if err != nil {
			klog.ErrorS(err, "sweeping an image", "pool", pool.Name, "image", name)
		}
	}
	s.mu.Lock()
	steps := s.steps
	s.mu.Unlock()
	var errs []error
	for _, st := range steps {
		if err := st.Sweep(ctx, pool); err != nil {
			errs = append(errs, fmt.Errorf("sweeping %s: %w", st.What, err))
		}
	}
	return errors.Join(errs...)
}

// forgetGone drops the clean marks of the pool's images that are no
// longer listed (removed by other means than the driver's own calls,
// which touch what they change), so that the marks stay as many as the
// pool's images. One sweep of a pool runs at a time, and only it marks.
func (s *sweeper) forgetGone(pool rbd.Pool, listed []string) {
	prefix := records.PoolImageKey(pool, "")
	have := make(map[string]bool, len(listed))
	for _, n := range listed {
		have[records.PoolImageKey(pool, n)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.clean {
		if strings.HasPrefix(k, prefix) && !have[k] {
			delete(s.clean, k)
		}
	}
}

// sweepHidden reclaims a hidden image nothing needs.
func (s *sweeper) sweepHidden(ctx context.Context, pool rbd.Pool, name, id string) error {
	// The image's own key: work in progress on its snapshots or clones
	// goes first.
	release, ok := s.locks.TryLock(records.ParentLock(pool.Name, id))
	if !ok {
		return nil
	}
	defer release()
	fam, err := s.backend.StatFamily(ctx, pool, name, "")
	if errors.Is(err, rbd.ErrNotFound) {
		// Listed but without a header: a removal cut short. Removing it
		// again completes it.
		rctx, cancel := context.WithTimeout(context.Background(), RemoveTimeout)
		defer cancel()
		if err := s.backend.RemoveImage(rctx, pool, name); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
		klog.V(2).InfoS("completed the removal of a hidden image", "pool", pool.Name, "image", name)
		s.o.Observer.Reclaimed(reclaimedHalfRemoved)
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := s.dropSettledTmp(ctx, pool, fam); err != nil {
		return err
	}
	if len(fam.Snaps) == 0 && fam.TrashedSnaps == 0 && fam.Watchers == 0 {
		// A candidate for reclaim: unless it is the peer's.
		if leave, err := s.leaveToPrimary(ctx, pool, fam); leave || err != nil {
			return err
		}
	}
	return s.reclaim(ctx, pool, id)
}

// sweepVolume removes a volume image nobody finished, or the temporary
// snapshots a volume clone left on its source.
func (s *sweeper) sweepVolume(ctx context.Context, pool rbd.Pool, name string) error {
	key := records.PoolImageKey(pool, name)
	clean, gen := s.isClean(key)
	if clean {
		return nil
	}
	release, ok := s.locks.TryLock(records.ImageLock(pool, name))
	if !ok {
		return nil // a request is creating it or cloning from it
	}
	defer release()
	fam, err := s.backend.StatFamily(ctx, pool, name, "")
	if errors.Is(err, rbd.ErrNotFound) {
		return nil // gone, or a deletion in progress that its retry completes
	}
	if err != nil {
		return err
	}
	if !s.names.Volume(name, fam.Metadata).Finished() {
		if s.settled(fam.Created) && fam.Watchers == 0 && len(fam.Snaps) == 0 {
			if leave, err := s.leaveToPrimary(ctx, pool, fam); leave || err != nil {
				return err
			}
			klog.InfoS("removing an unfinished volume image that no retry came back for", "pool", pool.Name, "image", name, "created", fam.Created)
			if err := s.removeImage(ctx, pool, fam); err != nil {
				return err
			}
			s.o.Observer.Reclaimed(reclaimedUnfinished)
		}
		return nil
	}
	release, ok = s.locks.TryLock(records.ParentLock(pool.Name, fam.ID))
	if !ok {
		return nil // its snapshots or clones are changing
	}
	defer release()
	tmpLeft, err := s.dropSettledTmp(ctx, pool, fam)
	if err != nil {
		return err
	}
	if !tmpLeft {
		s.markClean(key, gen)
	}
	return nil
}

// dropSettledTmp removes the temporary snapshots of volume clones older
// than one interval (RBD keeps one in its trash namespace while its clone
// needs it) and reports whether younger ones, or ones of a peer's copy,
// are left. The caller holds the image's parent lock.
func (s *sweeper) dropSettledTmp(ctx context.Context, pool rbd.Pool, fam rbd.Family) (left bool, err error) {
	checked := false
	for _, snap := range fam.Snaps {
		if !records.IsTmpSnap(snap.Name) {
			continue
		}
		if !s.settled(snap.Created) {
			left = true
			continue
		}
		if !checked {
			// A mirror copy holds the primary's snapshots: the
			// primary's sweep drops them there, and the next mirror
			// snapshot here.
			leave, err := s.leaveToPrimary(ctx, pool, fam)
			if err != nil || leave {
				return true, err
			}
			checked = true
		}
		if err := s.backend.RemoveSnapshot(ctx, pool, fam.ID, snap.Name); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return left, err
		}
		klog.InfoS("removed the temporary snapshot of a volume clone that no retry came back for", "pool", pool.Name, "image", fam.Name, "snap", snap.Name)
		s.o.Observer.Reclaimed(reclaimedTmpSnap)
	}
	return left, nil
}

// settled: older than one interval, so no request is still working on it.
func (s *sweeper) settled(t time.Time) bool { return time.Since(t) > s.interval }

// leaveToPrimary reports whether the image is a non-primary mirror copy,
// which the sweep leaves alone, whatever it looks like: the copy is the
// peer's, what it holds is what rbd-mirror last copied from the primary
// (a copy whose first sync was cut short lacks the volume's metadata and
// looks unfinished), and only the primary's site decides what becomes of
// it; rbd-mirror removes the copy when the primary goes or stops
// mirroring. librbd would refuse the removal anyway, each sweep again.
// The family carries the mirror info where the image has mirror
// snapshots; a copy without any yet (rbd-mirror made it, and stopped
// before its first sync) does not, so the sweep reads it for the images
// it would change, and only for those.
func (s *sweeper) leaveToPrimary(ctx context.Context, pool rbd.Pool, fam rbd.Family) (bool, error) {
	info := fam.Mirror
	if info == nil {
		mi, err := s.backend.MirrorInfo(ctx, pool, fam.Name)
		if errors.Is(err, rbd.ErrNotFound) {
			return true, nil // gone meanwhile: nothing to do
		}
		if err != nil {
			return false, fmt.Errorf("mirror info of %s before removing what it holds: %w", fam.Name, err)
		}
		info = &mi
	}
	if !nonPrimary(*info) {
		return false, nil
	}
	klog.V(2).InfoS("leaving a non-primary mirror copy to its primary site", "pool", pool.Name, "image", fam.Name)
	return true, nil
}

// nonPrimary: a copy of a mirrored image, or of one whose mirroring is
// being disabled (rbd-mirror then removes it), that is not the primary.
func nonPrimary(m rbd.MirrorInfo) bool {
	return (m.State == rbd.MirrorEnabled || m.State == rbd.MirrorDisabling) && !m.Primary
}
