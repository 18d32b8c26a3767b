// Package lock provides keyed try-locks: one operation per key at a time,
// and a second caller on a busy key is told so at once instead of waiting.
package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Keyed holds the set of busy keys. The zero value is not usable; use New.
type Keyed struct {
	mu   sync.Mutex
	busy map[string]struct{}
}

// New returns an empty key set.
func New() *Keyed { return &Keyed{busy: map[string]struct{}{}} }

// TryLock marks every key busy and returns a release function, or returns
// false (and marks nothing) if any key is already busy. Taking all keys at
// once avoids lock-order deadlocks between callers that need several.
func (k *Keyed) TryLock(keys ...string) (release func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if _, held := k.busy[key]; held {
			return nil, false
		}
	}
	for _, key := range keys {
		k.busy[key] = struct{}{}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, key := range keys {
				delete(k.busy, key)
			}
		})
	}, true
}

// waitPoll is how often Wait tries a busy key again.
const waitPoll = 20 * time.Millisecond

// Wait takes the key as TryLock does, polling until it is free or ctx
// ends: for work that must queue rather than be refused. The error wraps
// ctx's.
func (k *Keyed) Wait(ctx context.Context, key string) (release func(), err error) {
	for {
		if release, ok := k.TryLock(key); ok {
			return release, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", key, ctx.Err())
		case <-time.After(waitPoll):
		}
	}
}
