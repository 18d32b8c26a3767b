package mapper

import (
	"context"
	"testing"
	"time"
)

// A fenced rbd-fuse fails the loop device's last writes only once it
// hears of its fence: teardown waits for the detach for as much of the
// request as it can spare, never less than 10 s.
func TestDetachWait(t *testing.T) {
	if got := detachWait(context.Background()); got != 2*time.Minute {
		t.Errorf("no deadline: %v, want 2m", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := detachWait(ctx); got > 40*time.Second || got < 39*time.Second {
		t.Errorf("a minute left: %v, want about 40s", got)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	if got := detachWait(short); got != 10*time.Second {
		t.Errorf("15s left: %v, want 10s", got)
	}
}
