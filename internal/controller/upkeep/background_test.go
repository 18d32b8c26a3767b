package upkeep

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestBackgroundRunsOneTaskPerKeyAndStops(t *testing.T) {
	b := newBackground()
	var runs atomic.Int32
	release := make(chan struct{})
	task := func(ctx context.Context) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	b.start("a", task)
	b.start("a", task) // refused: "a" is running
	b.start("b", task)
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !b.busy("a") || !b.busy("b") || b.busy("c") {
		t.Fatalf("busy: a=%v b=%v c=%v", b.busy("a"), b.busy("b"), b.busy("c"))
	}
	release <- struct{}{} // one of them ends
	b.stop()              // cancels the other and waits for it
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d tasks ran, want 2", n)
	}
	if b.busy("a") || b.busy("b") {
		t.Fatal("a task is still marked running after stop")
	}
	b.start("c", task) // refused after stop
	if b.busy("c") || runs.Load() != 2 {
		t.Fatal("a task started after stop")
	}
}
