package controller

import (
	"testing"

	librbd "github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/e2e/ranges"
)

// objectSize is the RADOS object size of the volumes here (RBD's
// default, order 22): Ceph may report a changed range rounded out to it.
const objectSize = 4 * mib

func (e env) allocated(t *testing.T, snap string, size int64) []ranges.Range {
	t.Helper()
	s, err := csi.NewSnapshotMetadataClient(e.p.Conn).GetMetadataAllocated(harness.Ctx(t), &csi.GetMetadataAllocatedRequest{SnapshotId: snap, Secrets: e.c.Secrets()})
	harness.Must(t, err, "GetMetadataAllocated %s", snap)
	return ranges.Read(t, size, func() ([]*csi.BlockMetadata, int64, error) {
		r, err := s.Recv()
		return r.GetBlockMetadata(), r.GetVolumeCapacityBytes(), err
	})
}

func (e env) delta(t *testing.T, base, target string, size int64) []ranges.Range {
	t.Helper()
	s, err := csi.NewSnapshotMetadataClient(e.p.Conn).GetMetadataDelta(harness.Ctx(t), &csi.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target, Secrets: e.c.Secrets()})
	harness.Must(t, err, "GetMetadataDelta %s..%s", base, target)
	return ranges.Read(t, size, func() ([]*csi.BlockMetadata, int64, error) {
		r, err := s.Recv()
		return r.GetBlockMetadata(), r.GetVolumeCapacityBytes(), err
	})
}

// A backup's view of a volume, through the plugin on real Ceph: what a
// snapshot holds and what changed between two, while a client writes the
// volume and keeps its exclusive lock; for a restored volume its parent's
// data too; and still after the volume was deleted (its image hidden,
// kept for the snapshots).
func TestSnapshotMetadataOnRealCeph(t *testing.T) {
	e := setup(t)
	const size = 64 * mib
	vol := e.mustCreate(t, "cbt-a", size)
	ioctx, closeIoctx := e.c.AdminIoctx(t)
	defer closeIoctx()
	img, err := librbd.OpenImage(ioctx, imageOf(t, vol.VolumeId), librbd.NoSnapshot)
	harness.Must(t, err, "opening the volume's image")
	defer img.Close()
	write := func(off, n int64) {
		t.Helper()
		_, err := img.WriteAt(make([]byte, n), off)
		harness.Must(t, err, "writing %d+%d", off, n)
	}

	write(0, 64<<10)
	write(8*mib, 4*mib)
	s1, err := e.snapshot(t, "cbt-s1", vol.VolumeId)
	harness.Must(t, err, "snapshot 1")
	defer e.deleteSnapshot(t, s1.SnapshotId)
	write(20*mib, 128<<10)
	write(2*mib, 4096)
	s2, err := e.snapshot(t, "cbt-s2", vol.VolumeId)
	harness.Must(t, err, "snapshot 2")
	defer e.deleteSnapshot(t, s2.SnapshotId)

	write(40*mib, 4096) // takes the exclusive lock again, as a mounted volume's writer holds it
	owner, err := img.LockIsExclusiveOwner()
	harness.Must(t, err, "lock owner")
	if !owner {
		t.Fatal("the writer does not hold the exclusive lock after writing")
	}
	ranges.Covers(t, "allocated s1", e.allocated(t, s1.SnapshotId, size), ranges.Of(0, 64<<10, 8*mib, 4*mib), objectSize)
	ranges.Covers(t, "delta s1..s2", e.delta(t, s1.SnapshotId, s2.SnapshotId, size), ranges.Of(2*mib, 4096, 20*mib, 128<<10), objectSize)
	if owner, err := img.LockIsExclusiveOwner(); err != nil || !owner {
		t.Fatalf("the writer lost its exclusive lock to the metadata calls (owner %v, %v)", owner, err)
	}

	// A restore reads its parent's data: a backup of its snapshot must too.
	restored, err := e.createFrom(t, "cbt-restored", size, fromSnapshot(s1.SnapshotId))
	harness.Must(t, err, "restoring snapshot 1")
	r1, err := e.snapshot(t, "cbt-r1", restored.VolumeId)
	harness.Must(t, err, "snapshot of the restore")
	ranges.Covers(t, "allocated of the restore", e.allocated(t, r1.SnapshotId, size), ranges.Of(0, 64<<10, 8*mib, 4*mib), objectSize)
	e.deleteSnapshot(t, r1.SnapshotId)
	e.delete(t, restored.VolumeId)

	// Snapshots of one volume only; the base before the target.
	other := e.mustCreate(t, "cbt-b", 16*mib)
	o1, err := e.snapshot(t, "cbt-o1", other.VolumeId)
	harness.Must(t, err, "snapshot of another volume")
	defer e.deleteSnapshot(t, o1.SnapshotId)
	smc := csi.NewSnapshotMetadataClient(e.p.Conn)
	for _, c := range []struct {
		what         string
		base, target string
		want         codes.Code
	}{
		{"another volume's base", o1.SnapshotId, s2.SnapshotId, codes.InvalidArgument},
		{"a base newer than the target", s2.SnapshotId, s1.SnapshotId, codes.InvalidArgument},
	} {
		s, err := smc.GetMetadataDelta(harness.Ctx(t), &csi.GetMetadataDeltaRequest{BaseSnapshotId: c.base, TargetSnapshotId: c.target, Secrets: e.c.Secrets()})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, err, c.want, c.what)
	}
	s, err := smc.GetMetadataAllocated(harness.Ctx(t), &csi.GetMetadataAllocatedRequest{SnapshotId: s1.SnapshotId, StartingOffset: size + 1, Secrets: e.c.Secrets()})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.OutOfRange, "an offset past the end")

	// The deleted volume's snapshots still answer (its image is hidden).
	img.Close()
	e.delete(t, vol.VolumeId)
	ranges.Covers(t, "delta of a deleted volume's snapshots", e.delta(t, s1.SnapshotId, s2.SnapshotId, size), ranges.Of(2*mib, 4096, 20*mib, 128<<10), objectSize)
}

// A group snapshot's members, through the plugin on real Ceph: each
// answers as a snapshot of its volume, what it holds and what changed
// since an earlier member or an earlier snapshot of the volume (a diff by
// snapshot ID, which librbd has where it has group snapshots).
func TestSnapshotMetadataOfGroupMembers(t *testing.T) {
	e := setup(t)
	if want, release := groupSnapshotsExpected(t); !want {
		t.Skipf("librbd lacks group snapshot restores (%s)", release)
	}
	const size = 32 * mib
	vol := e.mustCreate(t, "cbt-g", size)
	ioctx, closeIoctx := e.c.AdminIoctx(t)
	defer closeIoctx()
	write := func(off, n int64) {
		t.Helper()
		img, err := librbd.OpenImage(ioctx, imageOf(t, vol.VolumeId), librbd.NoSnapshot)
		harness.Must(t, err, "opening the volume's image")
		defer img.Close()
		_, err = img.WriteAt(make([]byte, n), off)
		harness.Must(t, err, "writing %d+%d", off, n)
	}
	member := func(name string) string {
		t.Helper()
		gc := e.p.GroupController()
		resp, err := gc.CreateVolumeGroupSnapshot(harness.Ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: []string{vol.VolumeId}, Secrets: e.c.Secrets()})
		harness.Must(t, err, "CreateVolumeGroupSnapshot %s", name)
		g := resp.GroupSnapshot
		t.Cleanup(func() {
			_, err := gc.DeleteVolumeGroupSnapshot(harness.Ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshotId, Secrets: e.c.Secrets()})
			harness.Must(t, err, "DeleteVolumeGroupSnapshot %s", name)
		})
		if len(g.Snapshots) != 1 {
			t.Fatalf("group snapshot %s: members %v", name, g.Snapshots)
		}
		return g.Snapshots[0].SnapshotId
	}

	write(0, 64<<10)
	m1 := member("cbt-g1")
	write(8*mib, 128<<10)
	s2, err := e.snapshot(t, "cbt-g-s2", vol.VolumeId)
	harness.Must(t, err, "snapshot 2")
	defer e.deleteSnapshot(t, s2.SnapshotId)
	write(20*mib, 4096)
	m3 := member("cbt-g3")

	ranges.Covers(t, "allocated of a member", e.allocated(t, m1, size), ranges.Of(0, 64<<10), objectSize)
	ranges.Covers(t, "delta member to member", e.delta(t, m1, m3, size), ranges.Of(8*mib, 128<<10, 20*mib, 4096), objectSize)
	ranges.Covers(t, "delta member to snapshot", e.delta(t, m1, s2.SnapshotId, size), ranges.Of(8*mib, 128<<10), objectSize)
	ranges.Covers(t, "delta snapshot to member", e.delta(t, s2.SnapshotId, m3, size), ranges.Of(20*mib, 4096), objectSize)
	s, err := csi.NewSnapshotMetadataClient(e.p.Conn).GetMetadataDelta(harness.Ctx(t), &csi.GetMetadataDeltaRequest{BaseSnapshotId: m3, TargetSnapshotId: m1, Secrets: e.c.Secrets()})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "a later member as the base")
}
