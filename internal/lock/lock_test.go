package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// Wait queues behind a holder, and gives up with the context's error.
func TestWait(t *testing.T) {
	k := New()
	release, _ := k.TryLock("key")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := k.Wait(ctx, "key"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a held key past the deadline: %v", err)
	}
	got := make(chan func(), 1)
	go func() {
		r, err := k.Wait(context.Background(), "key")
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	time.Sleep(2 * waitPoll)
	select {
	case <-got:
		t.Fatal("Wait took a held key")
	default:
	}
	release()
	r := <-got
	if _, ok := k.TryLock("key"); ok {
		t.Fatal("the key is free while Wait's caller holds it")
	}
	r()
}
