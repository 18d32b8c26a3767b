package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// hiddenImages lists the pool's hidden images (deleted volumes kept for
// their dependents).
func (e env) hiddenImages(t *testing.T) []string {
	var hidden []string
	for _, img := range e.c.Images(t) {
		if strings.HasPrefix(img, "csi-del-") {
			hidden = append(hidden, img)
		}
	}
	return hidden
}

// waitSwept waits for the sweep to take the pool's hidden images away.
func (e env) waitSwept(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(e.hiddenImages(t)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("hidden images are still there a minute after a delete: %v", e.hiddenImages(t))
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.expectPoolEmpty(t)
}

// expectHiddenStays checks that, with the sweep off, the one hidden image
// is still there a while after the delete that would have triggered it.
func (e env) expectHiddenStays(t *testing.T) {
	t.Helper()
	time.Sleep(2 * time.Second)
	if len(e.hiddenImages(t)) != 1 {
		t.Fatalf("without the sweep the hidden image should stay: %v", e.c.Images(t))
	}
}

// startController starts a controller plugin with extra flags.
func startController(t *testing.T, c harness.Cluster, extra ...string) env {
	args := append([]string{"--mode", "controller"}, extra...)
	p := harness.StartPlugin(t, c, args...)
	return env{c: c, p: p, cc: p.Controller()}
}

// A controller killed between a clone's removal and its parent's reclaim
// leaves a hidden image nothing needs; no retry can find it again. The
// sweep after the next delete in the pool reclaims it, and only the sweep:
// with the sweep turned off it stays.
func TestSweepReclaimsWhatACrashLeft(t *testing.T) {
	e := setup(t)
	src, err := e.create(t, "sweep-src", 8*mib)
	harness.Must(t, err, "create source")
	snap, err := e.snapshot(t, "sweep-snap", src.Volume.VolumeId)
	harness.Must(t, err, "snapshot")
	clone, err := e.createFrom(t, "sweep-clone", 8*mib, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore")
	e.delete(t, src.Volume.VolumeId) // hidden: the snapshot needs it
	e.deleteSnapshot(t, snap.SnapshotId)
	if len(e.hiddenImages(t)) != 1 {
		t.Fatalf("the deleted source is not kept for its clone: %v", e.c.Images(t))
	}

	crashing := startController(t, e.c, "--test-crash-at", "DeleteVolume:removed")
	if _, err := crashing.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: clone.VolumeId, Secrets: e.c.Secrets()}); err == nil {
		t.Fatal("DeleteVolume survived --test-crash-at DeleteVolume:removed")
	}
	if imgs := e.c.Images(t); len(imgs) != 1 || !strings.HasPrefix(imgs[0], "csi-del-") {
		t.Fatalf("after the crash the pool should hold only the hidden source, has %v", imgs)
	}

	// The retry finds the clone gone and cannot know its parent.
	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, clone.VolumeId)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.delete(t, clone.VolumeId)
	swept.waitSwept(t)
}

// A removal of a hidden image cut short leaves its name listed without a
// header, which nothing can open by ID; the sweep completes the removal.
func TestSweepCompletesHalfRemovedHiddenImage(t *testing.T) {
	e := setup(t)
	v, err := e.create(t, "sweep-half", 8*mib)
	harness.Must(t, err, "create")
	snap, err := e.snapshot(t, "sweep-half-snap", v.Volume.VolumeId)
	harness.Must(t, err, "snapshot")
	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, v.Volume.VolumeId)
	hidden := e.hiddenImages(t)
	if len(hidden) != 1 {
		t.Fatalf("the deleted volume is not kept for its snapshot: %v", e.c.Images(t))
	}
	e.removeHeader(t, hidden[0])
	unswept.deleteSnapshot(t, snap.SnapshotId)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.deleteSnapshot(t, snap.SnapshotId)
	swept.waitSwept(t)
}
