package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The fault points of a group snapshot, in order: the controller's steps
// and the backend's inside them.
var groupCrashPoints = []string{
	"CreateVolumeGroupSnapshot:claimed", "CreateVolumeGroupSnapshot:grouped", "SnapshotGroup:taken",
	"CreateVolumeGroupSnapshot:snapshotted", "Clone:cloned", "CreateVolumeGroupSnapshot:cloned",
	"CreateVolumeGroupSnapshot:recorded", "CreateVolumeGroupSnapshot:hidden",
	"RemoveGroup:ungrouped", "RemoveGroup:unsnapped",
}

func (e env) groupSnapshot(t *testing.T, name string, ids []string) (*csi.VolumeGroupSnapshot, error) {
	resp, err := e.p.GroupController().CreateVolumeGroupSnapshot(harness.Ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: ids, Secrets: e.c.Secrets()})
	if err != nil {
		return nil, err
	}
	return resp.GroupSnapshot, nil
}

func (e env) deleteGroupSnapshot(t *testing.T, id string) {
	t.Helper()
	_, err := e.p.GroupController().DeleteVolumeGroupSnapshot(harness.Ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, Secrets: e.c.Secrets()})
	harness.Must(t, err, "DeleteVolumeGroupSnapshot %s", id)
}

// rbdGroups lists the RBD groups of the pool.
func (e env) rbdGroups(t *testing.T) []string {
	out, err := e.c.RBD(append([]string{"group", "ls", "-p", e.c.Pool}, e.c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd group ls: %s", out)
	return strings.Fields(out)
}

// A plugin killed at each step of a group snapshot, then restarted,
// answers the retry with one group snapshot (the same twice), which then
// deletes without a trace; the RBD group is gone after the retry.
func TestGroupSnapshotCrashRetryConverges(t *testing.T) {
	c := harness.LoadCluster(t)
	if want, release := groupSnapshotsExpected(t); !want {
		t.Skipf("librbd lacks group snapshot restores (%s)", release)
	}
	secretDir := harness.WriteControllerSecretDir(t, c)
	start := func(extra ...string) env {
		return startController(t, c, append([]string{"--controller-secret-dir", secretDir, "--reclaim-sweep-interval", "0"}, extra...)...)
	}
	healthy := start()
	ids := []string{healthy.mustCreate(t, "gcrash-a", 8*mib).VolumeId, healthy.mustCreate(t, "gcrash-b", 8*mib).VolumeId}
	before := healthy.c.Images(t)
	for _, point := range groupCrashPoints {
		t.Run(point, func(t *testing.T) {
			crashing := start("--test-crash-at", point)
			if _, err := crashing.groupSnapshot(t, "gcrash", ids); err == nil {
				t.Fatalf("the call survived --test-crash-at %s", point)
			} else if code := grpcstatus.Code(err); code != codes.Unavailable && code != codes.Internal {
				t.Fatalf("crash reported as %v", err)
			}
			g, err := healthy.groupSnapshot(t, "gcrash", ids)
			harness.Must(t, err, "retry after the crash")
			again, err := healthy.groupSnapshot(t, "gcrash", ids)
			harness.Must(t, err, "second retry")
			if again.GroupSnapshotId != g.GroupSnapshotId || len(g.Snapshots) != 2 || !slices.EqualFunc(g.Snapshots, again.Snapshots, func(a, b *csi.Snapshot) bool { return a.SnapshotId == b.SnapshotId }) {
				t.Fatalf("retries disagree: %v, %v", g, again)
			}
			if groups := healthy.rbdGroups(t); len(groups) != 0 {
				t.Fatalf("RBD groups left after the retry: %v", groups)
			}
			healthy.deleteGroupSnapshot(t, g.GroupSnapshotId)
			if images := healthy.c.Images(t); !slices.Equal(images, before) {
				t.Fatalf("images after the delete: %v, before: %v", images, before)
			}
		})
	}
}

// With no retry, the sweep settles the RBD group a crash left: it rolls
// back an unrecorded group snapshot and completes a recorded one. A later
// create of the name starts afresh or finds the completed one, and its
// delete leaves nothing (the package's leak check).
func TestGroupSnapshotCrashSweepConverges(t *testing.T) {
	c := harness.LoadCluster(t)
	if want, release := groupSnapshotsExpected(t); !want {
		t.Skipf("librbd lacks group snapshot restores (%s)", release)
	}
	secretDir := harness.WriteControllerSecretDir(t, c)
	healthy := startController(t, c, "--controller-secret-dir", secretDir, "--reclaim-sweep-interval", "0")
	ids := []string{healthy.mustCreate(t, "gsweep-a", 8*mib).VolumeId, healthy.mustCreate(t, "gsweep-b", 8*mib).VolumeId}
	for _, point := range []string{"CreateVolumeGroupSnapshot:cloned", "CreateVolumeGroupSnapshot:recorded"} {
		t.Run(point, func(t *testing.T) {
			crashing := startController(t, c, "--controller-secret-dir", secretDir, "--reclaim-sweep-interval", "0", "--test-crash-at", point)
			if _, err := crashing.groupSnapshot(t, "gsweep-"+point, ids); err == nil {
				t.Fatalf("the call survived --test-crash-at %s", point)
			}
			if len(healthy.rbdGroups(t)) != 1 {
				t.Fatalf("the crash left RBD groups %v, want one", healthy.rbdGroups(t))
			}
			time.Sleep(1100 * time.Millisecond) // older than one sweep interval
			sweeping := startController(t, c, "--controller-secret-dir", secretDir, "--reclaim-sweep-interval", "1s")
			waitFor(t, "the sweep to settle the RBD group", func() bool { return len(sweeping.rbdGroups(t)) == 0 })
			g, err := healthy.groupSnapshot(t, "gsweep-"+point, ids)
			harness.Must(t, err, "create after the sweep")
			healthy.deleteGroupSnapshot(t, g.GroupSnapshotId)
		})
	}
}
