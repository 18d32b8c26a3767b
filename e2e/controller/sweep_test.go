package controller

import (
	"encoding/json"
	"os/exec"
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
			t.Fatalf("hidden images are still there a minute later: %v", e.hiddenImages(t))
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
	clone := e.crashBeforeReclaim(t, "sweep")

	// The retry finds the clone gone and cannot know its parent.
	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, clone)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.delete(t, clone)
	swept.waitSwept(t)
}

// With credentials of its own the controller sweeps every pool it can read
// once per interval, with no delete to start it.
func TestPeriodicSweepNeedsNoDelete(t *testing.T) {
	e := setup(t)
	e.crashBeforeReclaim(t, "periodic")

	// Without credentials of its own there is nothing to sweep with.
	startController(t, e.c, "--reclaim-sweep-interval", "1s")
	time.Sleep(time.Second)
	e.expectHiddenStays(t)

	addr := freeAddr(t)
	swept := startController(t, e.c, "--reclaim-sweep-interval", "1s", "--metrics-address", addr,
		"--controller-secret-dir", harness.WriteControllerSecretDir(t, e.c))
	swept.waitSwept(t)
	expectMetrics(t, addr,
		`rbdcsi_reclaimed_total{what="hidden-image"} 1`,
		`rbdcsi_sweeps_total{result="success"}`,
	)
}

// crashBeforeReclaim leaves a hidden image nothing needs: a source kept for
// its snapshot's clone, whose controller is killed between the clone's
// removal and the source's reclaim. It returns the deleted clone's ID.
func (e env) crashBeforeReclaim(t *testing.T, prefix string) string {
	t.Helper()
	src, snap, clone := e.restoredSnapshot(t, prefix)
	e.delete(t, src.VolumeId) // hidden: the snapshot needs it
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
	return clone.VolumeId
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
	e.c.RemoveHeader(t, hidden[0])
	unswept.deleteSnapshot(t, snap.SnapshotId)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.deleteSnapshot(t, snap.SnapshotId)
	swept.waitSwept(t)
}

// CreateVolume calls that crashed and were never retried (the PVC was
// deleted meanwhile) leave an unfinished image, an unfinished clone, and a
// volume clone's temporary snapshot on its source; such a CreateSnapshot
// leaves the claim on its name. Once they are older
// than one sweep interval, the sweep after a delete removes them; the
// finished volumes and the user's snapshot stay.
func TestSweepRemovesWhatAbandonedCreatesLeft(t *testing.T) {
	e := setup(t)
	src := e.mustCreate(t, "abandoned-src", 8*mib)
	snap, err := e.snapshot(t, "abandoned-snap", src.VolumeId)
	harness.Must(t, err, "snapshot")
	defer e.deleteSnapshot(t, snap.SnapshotId)
	for point, create := range map[string]func(env) error{
		"CreateImage:created": func(c env) error { _, err := c.create(t, "abandoned-vol", 8*mib); return err },
		"Clone:cloned": func(c env) error {
			_, err := c.createFrom(t, "abandoned-restore", 8*mib, fromSnapshot(snap.SnapshotId))
			return err
		},
		"CreateVolume:source-snapshot": func(c env) error {
			_, err := c.createFrom(t, "abandoned-clone", 8*mib, fromVolume(src.VolumeId))
			return err
		},
	} {
		if create(startController(t, e.c, "--test-crash-at", point)) == nil {
			t.Fatalf("CreateVolume survived --test-crash-at %s", point)
		}
	}
	before := e.c.Images(t)
	if len(before) != 3 {
		t.Fatalf("want the source and two unfinished images after the crashes, have %v", before)
	}
	if snaps := e.userSnaps(t, imageOf(t, src.VolumeId)); len(snaps) != 2 {
		t.Fatalf("want the user's and a temporary snapshot on the source, have %v", snaps)
	}

	claim := "rbdcsi.snap." + e.c.SnapName(e.startCrashingSnapshot(t, src.VolumeId))
	if !e.objectExists(t, claim) {
		t.Fatalf("the abandoned CreateSnapshot left no claim %s", claim)
	}

	addr := freeAddr(t)
	swept := startController(t, e.c, "--reclaim-sweep-interval", "1s", "--metrics-address", addr)
	time.Sleep(1500 * time.Millisecond) // everything is older than one interval now
	scratch, err := swept.create(t, "abandoned-scratch", 8*mib)
	harness.Must(t, err, "create scratch")
	swept.delete(t, scratch.Volume.VolumeId)
	deadline := time.Now().Add(time.Minute)
	for {
		imgs, snaps := e.c.Images(t), e.userSnaps(t, imageOf(t, src.VolumeId))
		if len(imgs) == 1 && imgs[0] == imageOf(t, src.VolumeId) && len(snaps) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the delete: images %v, snapshots of the source %v", imgs, snaps)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if e.objectExists(t, claim) {
		t.Errorf("the abandoned snapshot's claim %s is still there", claim)
	}
	if left := e.c.IndexLeft(); len(left) > 0 {
		t.Errorf("index entries left: %v", left)
	}
	expectMetrics(t, addr,
		`rbdcsi_reclaimed_total{what="unfinished-image"} 2`,
		`rbdcsi_reclaimed_total{what="temporary-snapshot"} 1`,
		`rbdcsi_reclaimed_total{what="snapshot-claim"} 1`,
		`rbdcsi_sweeps_total{result="success"} 1`,
		`rbdcsi_background_tasks{kind="sweep"} 0`,
	)
	after, err := e.createFrom(t, "abandoned-after", 8*mib, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore the user's snapshot after the sweep")
	e.delete(t, after.VolumeId)
}

// userSnaps lists an image's snapshots in the user namespace.
func (e env) userSnaps(t *testing.T, image string) []string {
	t.Helper()
	out, err := e.c.RBD("snap", "ls", "--format", "json", e.c.Pool+"/"+image)
	harness.Must(t, err, "rbd snap ls: %s", out)
	var snaps []struct {
		Name string `json:"name"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &snaps), "rbd snap ls json")
	var names []string
	for _, s := range snaps {
		names = append(names, s.Name)
	}
	return names
}

// startCrashingSnapshot runs a CreateSnapshot that dies right after
// claiming its name and returns the request name.
func (e env) startCrashingSnapshot(t *testing.T, src string) string {
	t.Helper()
	const name = "abandoned-snapshot"
	if _, err := startController(t, e.c, "--test-crash-at", "CreateSnapshot:claimed").snapshot(t, name, src); err == nil {
		t.Fatal("CreateSnapshot survived --test-crash-at CreateSnapshot:claimed")
	}
	return name
}

// objectExists reports whether a RADOS object is in the pool.
func (e env) objectExists(t *testing.T, obj string) bool {
	t.Helper()
	out, err := exec.Command("rados", "-c", e.c.Conf, "--id", "admin", "-p", e.c.Pool, "stat", obj).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		t.Fatalf("rados stat %s: %v: %s", obj, err, out)
	}
	return err == nil
}
