package controller_test

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// Every order of deleting a source volume, its snapshot, a restore of the
// snapshot and a clone of the volume works for the user, keeps the
// snapshot restorable while it exists, and ends with nothing left.
func TestDeleteOrderIndependence(t *testing.T) {
	for name, order := range map[string][]string{
		"source first":   {"source", "snapshot", "clone"},
		"snapshot first": {"snapshot", "source", "clone"},
		"clone first":    {"clone", "snapshot", "source"},
		"source, clone":  {"source", "clone", "snapshot"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c := e.start("", noSweep) // the requests reclaim, not a sweep
			src, snap, clone := c.restoredSnapshot(t, "order")
			volClone := c.mustCreate(t, "order-volclone", fromVolume(src))
			snapGone := false
			for _, step := range order {
				switch step {
				case "source":
					c.delete(t, src)
					if !snapGone {
						late := c.mustCreate(t, "order-late", fromSnapshot(snap))
						c.delete(t, late)
					}
				case "snapshot":
					c.deleteSnapshot(t, snap)
					snapGone = true
				case "clone":
					c.delete(t, clone)
					c.delete(t, volClone)
				}
			}
			e.expectEmpty(t)
		})
	}
}

// A volume whose deleted snapshot no clone needs any more (two detaches
// raced) is deleted outright, not kept hidden for nothing.
func TestDeleteVolumeWithCloneLessTrashedSnapshot(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	src, snap, clone := c.restoredSnapshot(t, "trash")
	c.deleteSnapshot(t, snap)
	must(t, e.ceph.DetachBehind(e.pool, imageOf(t, clone)), "DetachBehind")
	c.delete(t, src)
	if h := e.hidden(); len(h) != 0 {
		t.Fatalf("the volume was kept for a snapshot nothing needs: %v", h)
	}
	c.delete(t, clone)
	e.expectEmpty(t)
}

// A deleted volume kept for its deleted snapshot's clone, whose last
// clone went without taking the snapshot along: no request reclaims it,
// the sweep does.
func TestSweepReclaimsHiddenImageWithCloneLessTrashedSnapshot(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	src, snap, clone := c.restoredSnapshot(t, "trash-hidden")
	c.delete(t, src)
	c.deleteSnapshot(t, snap)
	if len(e.hidden()) != 1 {
		t.Fatalf("the deleted source is not kept for its clone: %v", e.images())
	}
	must(t, e.ceph.DetachBehind(e.pool, imageOf(t, clone)), "DetachBehind")
	c.delete(t, clone)
	e.expectHiddenStays(t)

	e.start("", controller.Options{SweepInterval: interval}).delete(t, clone)
	waitFor(t, "the hidden image is reclaimed", func() bool { return len(e.leaks()) == 0 })
}

// Clones of a deleted snapshot of a deleted volume, deleted at once: the
// last one gone takes the kept data with it.
func TestConcurrentCloneDeletesReclaim(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	for round := 0; round < 3; round++ {
		src := c.mustCreate(t, fmt.Sprintf("cc-src-%d", round), nil)
		snap := c.mustSnapshot(t, fmt.Sprintf("cc-snap-%d", round), src)
		var clones []string
		for i := 0; i < 3; i++ {
			clones = append(clones, c.mustCreate(t, fmt.Sprintf("cc-clone-%d-%d", round, i), fromSnapshot(snap)))
		}
		c.delete(t, src)
		c.deleteSnapshot(t, snap)
		errs := make(chan error, len(clones))
		var wg sync.WaitGroup
		for _, id := range clones {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.deleteVolume(ctx(t), id) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err, "concurrent DeleteVolume")
		}
		e.expectEmpty(t)
	}
}

// A volume another client has open (mapped on a node) is not deleted.
func TestDeleteInUseIsRefused(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	v := c.mustCreate(t, "busy", nil)
	unwatch, err := e.ceph.Watch(e.pool, imageOf(t, v))
	must(t, err, "Watch")
	wantCode(t, c.deleteVolume(ctx(t), v), codes.FailedPrecondition, "delete while watched")
	if len(e.images()) != 1 {
		t.Fatalf("the image in use was removed: %v", e.images())
	}
	unwatch()
	c.delete(t, v)
	e.expectEmpty(t)
}

// An interrupted removal leaves the name without a header; deleting the
// volume again completes it.
func TestDeleteCompletesHalfRemovedImage(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	v := c.mustCreate(t, "half-removed", nil)
	must(t, e.ceph.RemoveHeader(e.pool, imageOf(t, v)), "RemoveHeader")
	c.delete(t, v)
	e.expectEmpty(t)
}
