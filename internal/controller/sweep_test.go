package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// interval is the sweep interval of these tests: what is older counts as
// abandoned.
const interval = 30 * time.Millisecond

// noSweep: a controller whose sweep is off (SweepInterval 0).
var noSweep = controller.Options{}

// expectHiddenStays checks that, with no sweep, the one hidden image is
// still there a while after the delete that would have started one.
func (e *env) expectHiddenStays(t *testing.T) {
	t.Helper()
	time.Sleep(3 * interval)
	if h := e.hidden(); len(h) != 1 {
		t.Fatalf("without the sweep the hidden image should stay: %v", e.images())
	}
}

// crashBeforeReclaim leaves a hidden image nothing needs: the source kept
// for its snapshot's clone, whose controller dies between the clone's
// removal and the source's reclaim. It returns the deleted clone's ID.
func (e *env) crashBeforeReclaim(t *testing.T, prefix string) string {
	t.Helper()
	c := e.start("", noSweep)
	src, snap, clone := c.restoredSnapshot(t, prefix)
	c.delete(t, src)
	c.deleteSnapshot(t, snap)
	if len(e.hidden()) != 1 {
		t.Fatalf("the deleted source is not kept for its clone: %v", e.images())
	}
	crashing := e.start("DeleteVolume:removed", noSweep)
	// The removal runs apart from the request, which gives up at its
	// deadline; the "process" dies at the fault point meanwhile.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := crashing.deleteVolume(short, clone); err == nil {
		t.Fatal("DeleteVolume survived its crash at DeleteVolume:removed")
	}
	if imgs := e.images(); len(imgs) != 1 || len(e.hidden()) != 1 {
		t.Fatalf("after the crash the pool should hold only the hidden source, has %v", imgs)
	}
	return clone
}

// The retry of the delete cannot know the gone clone's parent; the sweep
// after it reclaims the hidden source, and only the sweep.
func TestSweepReclaimsWhatACrashLeft(t *testing.T) {
	e := newEnv(t)
	clone := e.crashBeforeReclaim(t, "sweep")
	e.start("", noSweep).delete(t, clone)
	e.expectHiddenStays(t)

	u := &upkeep{}
	e.start("", controller.Options{SweepInterval: interval, Upkeep: u}).delete(t, clone)
	waitFor(t, "the hidden image is reclaimed", func() bool { return len(e.leaks()) == 0 })
	if n := u.count("hidden-image"); n != 1 {
		t.Errorf("reclaimed %d hidden images, want 1", n)
	}
}

// With credentials of its own the controller sweeps every pool once per
// interval without a delete; without, it has nothing to sweep with.
func TestPeriodicSweepNeedsNoDelete(t *testing.T) {
	e := newEnv(t)
	e.crashBeforeReclaim(t, "periodic")
	e.start("", controller.Options{SweepInterval: interval})
	e.expectHiddenStays(t)

	u := &upkeep{}
	e.start("", controller.Options{SweepInterval: interval, Credentials: ownCreds(), Upkeep: u})
	waitFor(t, "the periodic sweep reclaims the hidden image", func() bool { return len(e.leaks()) == 0 })
	waitFor(t, "the sweep is counted", func() bool { n, _ := u.swept(); return n > 0 })
	if _, err := u.swept(); err != nil {
		t.Errorf("the sweep failed: %v", err)
	}
}

// The removal of a hidden image cut short leaves its name without a
// header, which nothing opens by ID; the sweep completes the removal.
func TestSweepCompletesHalfRemovedHiddenImage(t *testing.T) {
	e := newEnv(t)
	unswept := e.start("", noSweep)
	v := unswept.mustCreate(t, "sweep-half", nil)
	snap := unswept.mustSnapshot(t, "sweep-half-snap", v)
	unswept.delete(t, v)
	hidden := e.hidden()
	if len(hidden) != 1 {
		t.Fatalf("the deleted volume is not kept for its snapshot: %v", e.images())
	}
	must(t, e.ceph.RemoveHeader(e.pool, hidden[0]), "RemoveHeader")
	unswept.deleteSnapshot(t, snap)
	e.expectHiddenStays(t)

	u := &upkeep{}
	e.start("", controller.Options{SweepInterval: interval, Upkeep: u}).deleteSnapshot(t, snap)
	waitFor(t, "the half-removed image is gone", func() bool { return len(e.leaks()) == 0 })
	if n := u.count("half-removed-image"); n != 1 {
		t.Errorf("completed %d half-removed images, want 1", n)
	}
}

// CreateVolume calls that died and were never retried leave an unfinished
// image, an unfinished clone, a volume clone's temporary snapshot; such a
// CreateSnapshot leaves the claim on its name. Once older than one
// interval, the sweep after a delete removes them all; the finished
// volume and the user's snapshot stay and still restore.
func TestSweepRemovesWhatAbandonedCreatesLeft(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	src := c.mustCreate(t, "abandoned-src", nil)
	snap := c.mustSnapshot(t, "abandoned-snap", src)
	for point, create := range map[string]func(*ctrl) error{
		"CreateImage:created": func(c *ctrl) error { _, err := c.create(t, "abandoned-vol"); return err },
		"Clone:cloned": func(c *ctrl) error {
			_, err := c.createFrom(t, "abandoned-restore", fromSnapshot(snap))
			return err
		},
		"CreateVolume:source-snapshot": func(c *ctrl) error {
			_, err := c.createFrom(t, "abandoned-clone", fromVolume(src))
			return err
		},
		"CreateSnapshot:claimed": func(c *ctrl) error { _, err := c.snapshot(t, "abandoned-snapshot", src); return err },
	} {
		crashing := e.start(point, noSweep)
		if died, err := crash(func() error { return create(crashing) }); !died {
			t.Fatalf("CreateVolume did not reach %s: %v", point, err)
		}
	}
	if imgs := e.images(); len(imgs) != 3 {
		t.Fatalf("want the source and two unfinished images after the crashes, have %v", imgs)
	}
	if snaps := e.userSnaps(t, imageOf(t, src)); len(snaps) != 2 {
		t.Fatalf("want the user's and a temporary snapshot on the source, have %v", snaps)
	}
	claim := "rbdcsi.snap.csi-snap-" + hash8("abandoned-snapshot")
	if _, ok, err := e.ceph.ClaimHolder(ctx(t), e.pool, claim); err != nil || !ok {
		t.Fatalf("the abandoned CreateSnapshot left no claim %s: %v", claim, err)
	}

	time.Sleep(2 * interval) // everything is older than one interval now
	u := &upkeep{}
	swept := e.start("", controller.Options{SweepInterval: interval, Upkeep: u})
	scratch := swept.mustCreate(t, "abandoned-scratch", nil)
	swept.delete(t, scratch)
	waitFor(t, "the sweep removes the leftovers", func() bool {
		imgs := e.images()
		return len(imgs) == 1 && imgs[0] == imageOf(t, src) && len(e.userSnaps(t, imgs[0])) == 1
	})
	waitFor(t, "the sweep withdraws the claim", func() bool { n, _ := u.swept(); return n > 0 })
	if _, ok, _ := e.ceph.ClaimHolder(ctx(t), e.pool, claim); ok {
		t.Errorf("the abandoned snapshot's claim %s is still there", claim)
	}
	for what, want := range map[string]int{"unfinished-image": 2, "temporary-snapshot": 1, "snapshot-claim": 1} {
		if n := u.count(what); n != want {
			t.Errorf("reclaimed %d of %s, want %d", n, what, want)
		}
	}
	after := swept.mustCreate(t, "abandoned-after", fromSnapshot(snap))
	swept.delete(t, after)
	swept.deleteSnapshot(t, snap)
	swept.delete(t, src)
	e.expectEmpty(t)
}

// hash8 is the 16 hex digits the driver names a snapshot by.
func hash8(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}
