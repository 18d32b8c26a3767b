package lock

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestTryLock(t *testing.T) {
	k := New()
	release, ok := k.TryLock("a", "b")
	if !ok {
		t.Fatal("first TryLock failed")
	}
	if _, ok := k.TryLock("b"); ok {
		t.Fatal("TryLock on a busy key succeeded")
	}
	if _, ok := k.TryLock("c", "a"); ok {
		t.Fatal("TryLock on a set with a busy key succeeded")
	}
	// The failed attempt must not have taken "c".
	rc, ok := k.TryLock("c")
	if !ok {
		t.Fatal("a failed TryLock left a key busy")
	}
	rc()
	release()
	release() // a second release is harmless
	if r, ok := k.TryLock("a", "b"); !ok {
		t.Fatal("keys stayed busy after release")
	} else {
		r()
	}
}

func TestTryLockConcurrent(t *testing.T) {
	k := New()
	var holders, overlaps atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				if r, ok := k.TryLock("key"); ok {
					if holders.Add(1) > 1 {
						overlaps.Add(1)
					}
					holders.Add(-1)
					r()
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d times two holders had one key at once", overlaps.Load())
	}
}
