// Package lock provides keyed try-locks: one operation per key at a time,
// and a second caller on a busy key is told so at once instead of waiting.
package lock

import "sync"

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
