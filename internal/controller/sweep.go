package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// sweepTimeout bounds one pass over a pool's hidden images.
const sweepTimeout = time.Hour

// sweeper finds hidden images (deleted volumes kept for their snapshots or
// clones) whose reclaim was cut short, e.g. by a controller crash between a
// clone's removal and its parent's reclaim, or by a removal interrupted
// half-way, and finishes them. The controller holds no credentials of its
// own for a pool, so a sweep runs after a delete in that pool, with that
// request's credentials, at most once per interval and never on the request
// path. A restarted controller sweeps at the first delete.
type sweeper struct {
	c        *Controller
	interval time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	last    map[string]time.Time // pool key -> start of its last sweep
	running map[string]bool
}

func newSweeper(c *Controller, interval time.Duration) *sweeper {
	ctx, cancel := context.WithCancel(context.Background())
	return &sweeper{c: c, interval: interval, ctx: ctx, cancel: cancel,
		last: map[string]time.Time{}, running: map[string]bool{}}
}

func (s *sweeper) stop() {
	s.cancel()
	s.wg.Wait()
}

// after is called when a delete in the pool succeeded: it starts a sweep
// of the pool unless one ran within the interval or is running.
func (s *sweeper) after(pool rbd.Pool) {
	if s.interval <= 0 {
		return
	}
	key := pool.MonHost + "/" + pool.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[key] || s.ctx.Err() != nil {
		return
	}
	if last, ok := s.last[key]; ok && time.Since(last) < s.interval {
		return
	}
	s.running[key], s.last[key] = true, time.Now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.running, key)
			s.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(s.ctx, sweepTimeout)
		defer cancel()
		if err := s.sweep(ctx, pool); err != nil {
			klog.ErrorS(err, "sweeping hidden images failed; the next delete in the pool tries again", "pool", pool.Name)
		}
	}()
}

// sweep reclaims every hidden image of the pool that nothing needs.
func (s *sweeper) sweep(ctx context.Context, pool rbd.Pool) error {
	names, err := s.c.backend.ListImages(ctx, pool)
	if errors.Is(err, rbd.ErrPoolNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		id, ok := strings.CutPrefix(name, hiddenPrefix)
		if !ok {
			continue
		}
		// The image's own key: an image with work in progress on its
		// snapshots or clones is left to that work.
		release, ok := s.c.locks.TryLock(parentKey(pool.Name, id))
		if !ok {
			continue
		}
		err := s.sweepOne(ctx, pool, name, id)
		release()
		if err != nil {
			klog.ErrorS(err, "reclaiming a hidden image", "pool", pool.Name, "image", name)
		}
	}
	return nil
}

func (s *sweeper) sweepOne(ctx context.Context, pool rbd.Pool, name, id string) error {
	_, err := s.c.backend.StatFamily(ctx, pool, name, "")
	if errors.Is(err, rbd.ErrNotFound) {
		// Listed but without a header: a removal cut short. Removing it
		// again completes it.
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		if err := s.c.backend.RemoveImage(rctx, pool, name); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return err
		}
		klog.V(2).InfoS("completed the removal of a hidden image", "pool", pool.Name, "image", name)
		return nil
	}
	if err != nil {
		return err
	}
	return s.c.reclaim(ctx, pool, id)
}
