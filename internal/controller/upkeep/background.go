package upkeep

import (
	"context"
	"sync"
	"time"
)

// background runs keyed work off the request path: at most one task per
// key at a time, all cancelled and waited for by stop. The flattens, the
// sparsifies, the sweeper and the KEK rotation each keep one.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]bool
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel, running: map[string]bool{}}
}

// start runs fn unless a task of that key is running or stop was called.
func (b *background) start(key string, fn func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[key] || b.ctx.Err() != nil {
		return
	}
	b.running[key] = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			delete(b.running, key)
			b.mu.Unlock()
		}()
		fn(b.ctx)
	}()
}

// every runs fn as task key once per interval, the first time one
// interval from now, until stop.
func (b *background) every(key string, interval time.Duration, fn func(ctx context.Context)) {
	b.start(key, func(ctx context.Context) {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			fn(ctx)
		}
	})
}

// busy reports whether a task of that key is running.
func (b *background) busy(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running[key]
}

func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}
