package controller

import (
	"testing"
)

// RBD removes a deleted snapshot (kept in its trash namespace) when its
// last clone detaches, but two clones detaching at once can both see the
// other still there, and the snapshot stays with no clone at all (seen
// once under make e2e). These tests make that state on purpose and show
// the data it pins does not stay forever.

// A volume whose deleted snapshot no clone needs any more is deleted
// outright, not kept hidden for nothing.
func TestDeleteVolumeWithCloneLessTrashedSnapshot(t *testing.T) {
	e := setup(t)
	src, snap, clone := e.restoredSnapshot(t, "trash")
	e.deleteSnapshot(t, snap.SnapshotId) // trashed: the clone needs it
	e.c.DetachBehindRBD(t, imageOf(t, src.VolumeId), imageOf(t, clone.VolumeId))

	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, src.VolumeId)
	if hidden := e.hiddenImages(t); len(hidden) != 0 {
		t.Fatalf("the volume was kept for a snapshot nothing needs: %v", hidden)
	}
	unswept.delete(t, clone.VolumeId)
	e.expectPoolEmpty(t)
}

// A deleted volume kept for its deleted snapshot's clone, whose last clone
// went without taking the snapshot along: no request will reclaim it, the
// sweep does.
func TestSweepReclaimsHiddenImageWithCloneLessTrashedSnapshot(t *testing.T) {
	e := setup(t)
	src, snap, clone := e.restoredSnapshot(t, "trash-hidden")
	e.delete(t, src.VolumeId)            // hidden: the snapshot needs it
	e.deleteSnapshot(t, snap.SnapshotId) // trashed: the clone needs it
	hidden := e.hiddenImages(t)
	if len(hidden) != 1 {
		t.Fatalf("the deleted source is not kept for its clone: %v", e.c.Images(t))
	}
	e.c.DetachBehindRBD(t, hidden[0], imageOf(t, clone.VolumeId))

	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, clone.VolumeId)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.delete(t, clone.VolumeId)
	swept.waitSwept(t)
}
