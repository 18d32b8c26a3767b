package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

func (c *ctrl) groupSnapshot(t *testing.T, name string, vols ...string) (*csi.VolumeGroupSnapshot, error) {
	resp, err := c.c.GroupController().CreateVolumeGroupSnapshot(ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: vols, Secrets: secrets()})
	if err != nil {
		return nil, err
	}
	return resp.GroupSnapshot, nil
}

func (c *ctrl) mustGroupSnapshot(t *testing.T, name string, vols ...string) *csi.VolumeGroupSnapshot {
	t.Helper()
	g, err := c.groupSnapshot(t, name, vols...)
	must(t, err, "CreateVolumeGroupSnapshot "+name)
	return g
}

func (c *ctrl) deleteGroupSnapshot(t *testing.T, id string, snaps ...string) error {
	_, err := c.c.GroupController().DeleteVolumeGroupSnapshot(ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: snaps, Secrets: secrets()})
	return err
}

func memberIDs(g *csi.VolumeGroupSnapshot) []string {
	var ids []string
	for _, s := range g.GetSnapshots() {
		ids = append(ids, s.GetSnapshotId())
	}
	return ids
}

// The life of a group snapshot: one member per volume, each an ordinary
// snapshot that restores, idempotent by name, deleted only as a whole,
// and nothing left once the group snapshot and the volumes are gone.
func TestGroupSnapshotLifecycle(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	vols := []string{c.mustCreate(t, "g-a", nil), c.mustCreate(t, "g-b", nil), c.mustCreate(t, "g-c", nil)}
	g := c.mustGroupSnapshot(t, "g-snap", vols...)
	if !g.ReadyToUse || len(g.Snapshots) != 3 || g.CreationTime == nil {
		t.Fatalf("group snapshot: %v", g)
	}
	var sources []string
	for _, s := range g.Snapshots {
		if s.GroupSnapshotId != g.GroupSnapshotId || !s.ReadyToUse || s.SizeBytes != 8*mib {
			t.Errorf("member %v of %s", s, g.GroupSnapshotId)
		}
		sources = append(sources, s.SourceVolumeId)
	}
	if !slices.Equal(slices.Sorted(slices.Values(sources)), slices.Sorted(slices.Values(vols))) {
		t.Errorf("members' sources %v, want %v", sources, vols)
	}
	// The RBD group is gone: the next group snapshot may take the volumes.
	if groups, err := e.ceph.ListGroups(ctx(t), e.pool); err != nil || len(groups) != 0 {
		t.Fatalf("groups left after the create: %v %v", groups, err)
	}

	again := c.mustGroupSnapshot(t, "g-snap", vols[2], vols[0], vols[1])
	if again.GroupSnapshotId != g.GroupSnapshotId || !slices.Equal(memberIDs(again), memberIDs(g)) {
		t.Fatalf("retry answered %v, first %v", again, g)
	}
	_, err := c.groupSnapshot(t, "g-snap", vols[0], vols[1])
	wantCode(t, err, codes.AlreadyExists, "same name, other volumes")
	second := c.mustGroupSnapshot(t, "g-snap-2", vols[0], vols[1])

	gc := c.c.GroupController()
	got, err := gc.GetVolumeGroupSnapshot(ctx(t), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshotId, SnapshotIds: memberIDs(g), Secrets: secrets()})
	must(t, err, "GetVolumeGroupSnapshot")
	if !slices.Equal(memberIDs(got.GroupSnapshot), memberIDs(g)) {
		t.Errorf("Get answered %v, want %v", got.GroupSnapshot, g)
	}
	_, err = gc.GetVolumeGroupSnapshot(ctx(t), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshotId, SnapshotIds: memberIDs(second), Secrets: secrets()})
	wantCode(t, err, codes.InvalidArgument, "Get with another group's snapshot IDs")

	member := g.Snapshots[0].SnapshotId
	_, err = c.c.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: member, Secrets: secrets()})
	wantCode(t, err, codes.InvalidArgument, "DeleteSnapshot of a member of a live group snapshot")
	snap, err := c.c.GetSnapshot(ctx(t), &csi.GetSnapshotRequest{SnapshotId: member, Secrets: secrets()})
	must(t, err, "GetSnapshot of a member")
	if snap.Snapshot.GroupSnapshotId != g.GroupSnapshotId || snap.Snapshot.SourceVolumeId != g.Snapshots[0].SourceVolumeId {
		t.Errorf("GetSnapshot of a member: %v", snap.Snapshot)
	}

	// A member restores; the restore outlives the group snapshot and
	// its source volume.
	restored := c.mustCreate(t, "g-restore", fromSnapshot(member))
	wantCode(t, c.deleteGroupSnapshot(t, g.GroupSnapshotId, memberIDs(second)...), codes.InvalidArgument, "Delete with another group's snapshot IDs")
	must(t, c.deleteGroupSnapshot(t, g.GroupSnapshotId, memberIDs(g)...), "DeleteVolumeGroupSnapshot")
	must(t, c.deleteGroupSnapshot(t, g.GroupSnapshotId, memberIDs(g)...), "DeleteVolumeGroupSnapshot again")
	_, err = gc.GetVolumeGroupSnapshot(ctx(t), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshotId, Secrets: secrets()})
	wantCode(t, err, codes.NotFound, "Get of a deleted group snapshot")
	for _, id := range memberIDs(g) {
		_, err := c.c.GetSnapshot(ctx(t), &csi.GetSnapshotRequest{SnapshotId: id, Secrets: secrets()})
		wantCode(t, err, codes.NotFound, "GetSnapshot of a deleted group's member")
	}
	must(t, c.deleteGroupSnapshot(t, second.GroupSnapshotId), "DeleteVolumeGroupSnapshot without snapshot IDs")
	for _, v := range vols {
		c.delete(t, v)
	}
	c.delete(t, restored)
	e.expectEmpty(t)
}

// An image can be in one RBD group only: a volume in someone else's
// group is a clear error, and the attempt leaves nothing of its own.
func TestGroupSnapshotOfVolumeInForeignGroup(t *testing.T) {
	e := newEnv(t)
	c := e.start("", noSweep)
	a, b := c.mustCreate(t, "f-a", nil), c.mustCreate(t, "f-b", nil)
	must(t, e.ceph.CreateGroup(ctx(t), e.pool, "someone-elses"), "CreateGroup")
	must(t, e.ceph.AddToGroup(ctx(t), e.pool, "someone-elses", imageOf(t, b)), "AddToGroup")
	_, err := c.groupSnapshot(t, "f-snap", a, b)
	wantCode(t, err, codes.FailedPrecondition, "a volume in a foreign group")
	if groups, _ := e.ceph.ListGroups(ctx(t), e.pool); !slices.Equal(groups, []string{"someone-elses"}) {
		t.Fatalf("groups after the failed create: %v", groups)
	}
	must(t, e.ceph.RemoveGroup(ctx(t), e.pool, "someone-elses"), "RemoveGroup")
	c.delete(t, a)
	c.delete(t, b)
	e.expectEmpty(t)
}

// Where librbd lacks clone-by-snapshot-ID (before Squid), the capability
// is absent and a create says why.
func TestGroupSnapshotsUnsupported(t *testing.T) {
	e := &env{t: t, ceph: fake.New(fake.Options{Pools: []string{poolName}, NoGroupSnapshots: true}), pool: newEnv(t).pool}
	c := e.start("", noSweep)
	if c.c.GroupSnapshots() == nil {
		t.Fatal("GroupSnapshots is nil on a backend without them")
	}
	caps, err := c.c.GroupController().GroupControllerGetCapabilities(ctx(t), &csi.GroupControllerGetCapabilitiesRequest{})
	must(t, err, "GroupControllerGetCapabilities")
	if len(caps.Capabilities) != 0 {
		t.Fatalf("capabilities %v without group snapshots", caps.Capabilities)
	}
	v := c.mustCreate(t, "u-a", nil)
	_, err = c.groupSnapshot(t, "u-snap", v)
	wantCode(t, err, codes.FailedPrecondition, "group snapshot without library support")
	c.delete(t, v)
	e.expectEmpty(t)
}

// A controller that dies at any step of a group snapshot leaves what a
// retry completes (the same answer twice) or, with no retry, what the
// sweep completes or rolls back; nothing is left either way.
func TestGroupSnapshotCrashConverges(t *testing.T) {
	points := []string{
		"CreateVolumeGroupSnapshot:claimed", "CreateVolumeGroupSnapshot:grouped",
		"CreateVolumeGroupSnapshot:snapshotted", "Clone:cloned", "CreateVolumeGroupSnapshot:cloned",
		"CreateVolumeGroupSnapshot:recorded", "CreateVolumeGroupSnapshot:hidden",
	}
	for _, point := range points {
		for _, retry := range []bool{true, false} {
			name := point + map[bool]string{true: "/retry", false: "/sweep"}[retry]
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				healthy := e.start("", noSweep)
				vols := []string{healthy.mustCreate(t, "c-a", nil), healthy.mustCreate(t, "c-b", nil)}
				crashing := e.start(point, noSweep)
				if died, err := crash(func() error { _, err := crashing.groupSnapshot(t, "c-snap", vols...); return err }); !died {
					t.Fatalf("the call did not reach %s: %v", point, err)
				}
				if retry {
					g := healthy.mustGroupSnapshot(t, "c-snap", vols...)
					again := healthy.mustGroupSnapshot(t, "c-snap", vols...)
					if !slices.Equal(memberIDs(g), memberIDs(again)) {
						t.Fatalf("retries disagree: %v, %v", g, again)
					}
					restored := healthy.mustCreate(t, "c-restore", fromSnapshot(g.Snapshots[1].SnapshotId))
					must(t, healthy.deleteGroupSnapshot(t, g.GroupSnapshotId), "DeleteVolumeGroupSnapshot")
					healthy.delete(t, restored)
				} else {
					time.Sleep(2 * interval) // older than one interval: abandoned
					sweeping := e.start("", controller.Options{SweepInterval: interval})
					// A delete in the pool starts the sweep.
					sweeping.delete(t, sweeping.mustCreate(t, "c-trigger", nil))
					waitFor(t, "the sweep settles the group", func() bool {
						groups, _ := e.ceph.ListGroups(context.Background(), e.pool)
						return len(groups) == 0
					})
					// A recorded group snapshot was completed: its ID
					// (which the CO never heard) still deletes it.
					gid := volid.Group{ClusterID: clusterID, Pool: poolName, Group: groupName(t, "c-snap")}
					must(t, healthy.deleteGroupSnapshot(t, gid.String()), "DeleteVolumeGroupSnapshot after the sweep")
				}
				for _, v := range vols {
					healthy.delete(t, v)
				}
				waitFor(t, "nothing is left", func() bool { return len(e.leaks()) == 0 })
			})
		}
	}
}

// groupName is the RBD group name a controller gives a group snapshot of
// that request name, read from the ID of one made in a cluster of its own.
func groupName(t *testing.T, name string) string {
	t.Helper()
	p := newEnv(t).start("", noSweep)
	g := p.mustGroupSnapshot(t, name, p.mustCreate(t, "probe-vol", nil))
	gid, err := volid.DecodeGroup(g.GroupSnapshotId)
	must(t, err, "group snapshot ID")
	return gid.Group
}

// cloneFailer fails the clones of images named with the given suffix, as
// a full pool would.
type cloneFailer struct {
	rbd.Backend
	suffix string
}

func (f cloneFailer) Clone(ctx context.Context, parent, child rbd.Pool, name string, spec rbd.CloneSpec) error {
	if strings.HasSuffix(name, f.suffix) {
		return fmt.Errorf("cloning %s: %w", name, rbd.ErrNoSpace)
	}
	return f.Backend.Clone(ctx, parent, child, name, spec)
}

// A create that fails after some members were made (the second member's
// clone finds the pool full) rolls them back: no member image or
// snapshot, no group, no record; the error says why, and a later try,
// with room again, succeeds.
func TestGroupSnapshotFailedMidwayLeavesNoMembers(t *testing.T) {
	e := newEnv(t)
	healthy := e.start("", noSweep)
	vols := []string{healthy.mustCreate(t, "m-a", nil), healthy.mustCreate(t, "m-b", nil), healthy.mustCreate(t, "m-c", nil)}
	before := e.leaks()
	e.wrap = func(b rbd.Backend) rbd.Backend { return cloneFailer{Backend: b, suffix: "-1"} }
	failing := e.start("", noSweep)
	e.wrap = nil
	_, err := failing.groupSnapshot(t, "m-snap", vols...)
	wantCode(t, err, codes.ResourceExhausted, "group snapshot in a full pool")
	if left := e.leaks(); !slices.Equal(left, before) {
		t.Fatalf("the failed create left %v (before: %v)", left, before)
	}
	g := healthy.mustGroupSnapshot(t, "m-snap", vols...)
	must(t, healthy.deleteGroupSnapshot(t, g.GroupSnapshotId), "DeleteVolumeGroupSnapshot")
	for _, v := range vols {
		healthy.delete(t, v)
	}
	e.expectEmpty(t)
}
