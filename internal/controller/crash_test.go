package controller_test

import (
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// A controller that dies inside an operation, at each fault point, leaves
// what a retry on a healthy controller completes: both retries return the
// same object, at most one new image, no temporary snapshot left.
func TestCrashInsideOperationsConverges(t *testing.T) {
	e := newEnv(t)
	healthy := e.start("", controller.Options{})
	src := healthy.mustCreate(t, "crash-src", nil)
	snap := healthy.mustSnapshot(t, "crash-base-snap", src)

	for _, tc := range []struct {
		point  string
		call   func(c *ctrl) (string, error)
		isSnap bool
	}{
		{"CreateImage:created", func(c *ctrl) (string, error) { return c.create(t, "crash-vol") }, false},
		{"CreateSnapshot:claimed", func(c *ctrl) (string, error) { return c.snapshot(t, "crash-snap", src) }, true},
		{"Clone:cloned", func(c *ctrl) (string, error) { return c.createFrom(t, "crash-restore", fromSnapshot(snap)) }, false},
		{"CreateVolume:source-snapshot", func(c *ctrl) (string, error) { return c.createFrom(t, "crash-clone", fromVolume(src)) }, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			before := len(e.images())
			crashing := e.start(tc.point, controller.Options{})
			if died, err := crash(func() error { _, err := tc.call(crashing); return err }); !died {
				t.Fatalf("the call did not reach %s: %v", tc.point, err)
			}
			id, err := tc.call(healthy)
			must(t, err, "retry after the crash")
			again, err := tc.call(healthy)
			must(t, err, "second retry")
			if again != id {
				t.Fatalf("retries disagree: %s, %s", id, again)
			}
			if n := len(e.images()) - before; n > 1 {
				t.Fatalf("%d new images after crash and retry: %v", n, e.images())
			}
			// The base snapshot, plus the new one in the snapshot case.
			want := 1
			if tc.isSnap {
				want = 2
			}
			if snaps := e.userSnaps(t, imageOf(t, src)); len(snaps) != want {
				t.Fatalf("source has snapshots %v, want %d", snaps, want)
			}
			if tc.isSnap {
				healthy.deleteSnapshot(t, id)
			} else {
				healthy.delete(t, id)
			}
		})
	}
	healthy.deleteSnapshot(t, snap)
	healthy.delete(t, src)
	e.expectEmpty(t)
}
