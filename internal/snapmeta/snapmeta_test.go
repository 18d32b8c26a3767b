package snapmeta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

const mib = 1 << 20

// env is a Server on the fake behind a real gRPC stream, and a volume
// image to write and snapshot.
type env struct {
	t      *testing.T
	ceph   *fake.Ceph
	pool   rbd.Pool
	client csi.SnapshotMetadataClient
}

func newEnv(t *testing.T, page int) *env {
	t.Helper()
	e := &env{t: t, ceph: fake.New(fake.Options{}), pool: rbd.Pool{MonHost: "fake", Name: "rbd"}}
	srv := New(Options{
		Backend: e.ceph, Names: records.NewNames("", nil), Page: page,
		Pool: func(clusterID, pool string, _ map[string]string) (rbd.Pool, error) {
			if clusterID != "c1" {
				return rbd.Pool{}, status.Errorf(codes.InvalidArgument, "no cluster %s", clusterID)
			}
			return e.pool.WithName(pool), nil
		},
	})
	l := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	csi.RegisterSnapshotMetadataServer(g, srv)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.client = csi.NewSnapshotMetadataClient(conn)
	return e
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// image makes an image of size bytes and returns its ID.
func (e *env) image(name string, size uint64) string {
	e.t.Helper()
	e.must(e.ceph.CreateImage(context.Background(), e.pool, name, rbd.ImageSpec{Size: size}))
	info, err := e.ceph.Stat(context.Background(), e.pool, name)
	e.must(err)
	return info.ID
}

func (e *env) write(image string, off, length uint64) {
	e.t.Helper()
	e.must(e.ceph.WriteAt(context.Background(), e.pool, image, off, make([]byte, length)))
}

// snap snapshots image and returns the snapshot's ID.
func (e *env) snap(image, id, snap string) string {
	e.t.Helper()
	e.must(e.ceph.CreateSnapshot(context.Background(), e.pool, image, snap))
	return volid.Snapshot{ClusterID: "c1", Pool: "rbd", ImageID: id, Snap: snap}.String()
}

// message is one response of a stream, either kind.
type message struct {
	size   int64
	blocks []*csi.BlockMetadata
}

func (e *env) allocated(req *csi.GetMetadataAllocatedRequest) ([]message, error) {
	s, err := e.client.GetMetadataAllocated(context.Background(), req)
	if err != nil {
		return nil, err
	}
	return drain(func() (message, error) {
		r, err := s.Recv()
		if r.GetBlockMetadataType() != csi.BlockMetadataType_VARIABLE_LENGTH && err == nil {
			e.t.Errorf("block_metadata_type %v", r.GetBlockMetadataType())
		}
		return message{r.GetVolumeCapacityBytes(), r.GetBlockMetadata()}, err
	})
}

func (e *env) delta(req *csi.GetMetadataDeltaRequest) ([]message, error) {
	s, err := e.client.GetMetadataDelta(context.Background(), req)
	if err != nil {
		return nil, err
	}
	return drain(func() (message, error) {
		r, err := s.Recv()
		return message{r.GetVolumeCapacityBytes(), r.GetBlockMetadata()}, err
	})
}

func drain(recv func() (message, error)) ([]message, error) {
	var out []message
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// ranges flattens a stream to [offset, size] pairs, checking that every
// message names the volume's size and that the ranges are in order,
// without overlap.
func ranges(t *testing.T, msgs []message, size int64) [][2]int64 {
	t.Helper()
	var out [][2]int64
	end := int64(-1)
	for _, m := range msgs {
		if m.size != size {
			t.Errorf("volume_capacity_bytes %d, want %d", m.size, size)
		}
		for _, b := range m.blocks {
			if b.ByteOffset < end || b.SizeBytes <= 0 {
				t.Errorf("range %d+%d out of order after %d, or empty", b.ByteOffset, b.SizeBytes, end)
			}
			end = b.ByteOffset + b.SizeBytes
			out = append(out, [2]int64{b.ByteOffset, b.SizeBytes})
		}
	}
	return out
}

func equal(t *testing.T, what string, got, want [][2]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

func TestAllocatedInPagesAndMessages(t *testing.T) {
	e := newEnv(t, 1) // a Diff call for each range
	id := e.image("csi-vol-a", 64*mib)
	e.write("csi-vol-a", 0, 64<<10)
	e.write("csi-vol-a", 8*mib, 4*mib)
	e.write("csi-vol-a", 20*mib, 128<<10)
	s1 := e.snap("csi-vol-a", id, "csi-snap-1")
	e.write("csi-vol-a", 40*mib, mib) // after the snapshot: not in it

	msgs, err := e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s1})
	e.must(err)
	want := [][2]int64{{0, 64 << 10}, {8 * mib, 4 * mib}, {20 * mib, 128 << 10}}
	equal(t, "allocated", ranges(t, msgs, 64*mib), want)

	msgs, err = e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s1, MaxResults: 1})
	e.must(err)
	if len(msgs) != 3 {
		t.Errorf("max_results 1: %d messages, want 3", len(msgs))
	}
	equal(t, "max_results 1", ranges(t, msgs, 64*mib), want)

	// Resuming inside a range starts the first range there.
	msgs, err = e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s1, StartingOffset: 9 * mib})
	e.must(err)
	equal(t, "from 9 MiB", ranges(t, msgs, 64*mib), [][2]int64{{9 * mib, 3 * mib}, {20 * mib, 128 << 10}})
}

func TestEmptySnapshotStillGivesItsSize(t *testing.T) {
	e := newEnv(t, 0)
	id := e.image("csi-vol-a", 16*mib)
	s1 := e.snap("csi-vol-a", id, "csi-snap-1")
	for _, off := range []int64{0, 16 * mib} { // the end itself is a valid offset
		msgs, err := e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s1, StartingOffset: off})
		e.must(err)
		if len(msgs) != 1 || len(msgs[0].blocks) != 0 || msgs[0].size != 16*mib {
			t.Errorf("offset %d: %+v, want one message with the size and no ranges", off, msgs)
		}
	}
}

// A delta lists what was written, discarded or grown since the base; a
// write that touches a discarded range is one range with it, also where
// the two come from different Diff calls (a page of one extent).
func TestDeltaAfterGrowthAndDiscard(t *testing.T) {
	for _, page := range []int{0, 1} {
		t.Run(fmt.Sprintf("page %d", page), func(t *testing.T) {
			e := newEnv(t, page)
			id := e.image("csi-vol-a", 32*mib)
			e.write("csi-vol-a", 0, 8*mib)
			s1 := e.snap("csi-vol-a", id, "csi-snap-1")
			e.write("csi-vol-a", mib, 64<<10)
			e.write("csi-vol-a", 3*mib, mib)
			e.must(e.ceph.Discard(context.Background(), e.pool, "csi-vol-a", 4*mib, 4*mib))
			e.must(e.ceph.Resize(context.Background(), e.pool, "csi-vol-a", 64*mib))
			e.write("csi-vol-a", 40*mib, mib)
			s2 := e.snap("csi-vol-a", id, "csi-snap-2")

			msgs, err := e.delta(&csi.GetMetadataDeltaRequest{BaseSnapshotId: s1, TargetSnapshotId: s2})
			e.must(err)
			equal(t, "delta", ranges(t, msgs, 64*mib), [][2]int64{{mib, 64 << 10}, {3 * mib, 5 * mib}, {40 * mib, mib}})

			// The same snapshots, as a backup tool uses them: a full copy
			// of the base, then the delta.
			msgs, err = e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s2})
			e.must(err)
			equal(t, "allocated after", ranges(t, msgs, 64*mib), [][2]int64{{0, 4 * mib}, {40 * mib, mib}})
		})
	}
}

func TestAllocatedReadsThroughTheParent(t *testing.T) {
	e := newEnv(t, 0)
	e.image("csi-vol-a", 16*mib)
	e.write("csi-vol-a", 0, 2*mib)
	e.snap("csi-vol-a", "", "csi-snap-p")
	e.must(e.ceph.Clone(context.Background(), e.pool, e.pool, "csi-vol-b", rbd.CloneSpec{ParentImage: "csi-vol-a", ParentSnap: "csi-snap-p", ImageSpec: rbd.ImageSpec{Size: 16 * mib}}))
	info, err := e.ceph.Stat(context.Background(), e.pool, "csi-vol-b")
	e.must(err)
	e.write("csi-vol-b", mib, mib)
	e.write("csi-vol-b", 8*mib, mib)
	s := e.snap("csi-vol-b", info.ID, "csi-snap-c")
	msgs, err := e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s})
	e.must(err)
	equal(t, "clone", ranges(t, msgs, 16*mib), [][2]int64{{0, 2 * mib}, {8 * mib, mib}})
}

// An encrypted volume's image starts with the LUKS header: the ranges
// are the user's device's, the header's writes are left out, and the
// size is still the volume's.
func TestEncryptedVolumeInTheUsersOffsets(t *testing.T) {
	e := newEnv(t, 1) // a Diff call for each range, the first inside the header
	id := e.image("csi-vol-c", 64*mib)
	e.must(e.ceph.SetMetadata(context.Background(), e.pool, "csi-vol-c", kms.VolumeKey{KMSID: "k1", DEK: kms.Wrapped("v1.k1.AAAA"), State: kms.StateFormatted}.Metadata()))
	e.write("csi-vol-c", 0, 32<<10)     // the header
	e.write("csi-vol-c", 15*mib, 2*mib) // across its end: the user's part is 1 MiB at 0
	e.write("csi-vol-c", luks.DataOffset+8*mib, mib)
	s1 := e.snap("csi-vol-c", id, "csi-snap-1")
	e.write("csi-vol-c", 4096, 4096) // a header change: not the user's data
	e.write("csi-vol-c", luks.DataOffset+20*mib, 64<<10)
	s2 := e.snap("csi-vol-c", id, "csi-snap-2")

	msgs, err := e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s1})
	e.must(err)
	equal(t, "allocated", ranges(t, msgs, 64*mib), [][2]int64{{0, mib}, {8 * mib, mib}})
	msgs, err = e.delta(&csi.GetMetadataDeltaRequest{BaseSnapshotId: s1, TargetSnapshotId: s2})
	e.must(err)
	equal(t, "delta", ranges(t, msgs, 64*mib), [][2]int64{{20 * mib, 64 << 10}})
	msgs, err = e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s2, StartingOffset: 8*mib + 4096})
	e.must(err)
	equal(t, "from an offset of the user's", ranges(t, msgs, 64*mib), [][2]int64{{8*mib + 4096, mib - 4096}, {20 * mib, 64 << 10}})
	// The user's device ends DataOffset before the volume's size: an
	// offset between the two finds nothing, one past the size is refused.
	msgs, err = e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: s2, StartingOffset: 60 * mib})
	e.must(err)
	equal(t, "past the device's end", ranges(t, msgs, 64*mib), nil)
}

func TestErrors(t *testing.T) {
	e := newEnv(t, 0)
	id := e.image("csi-vol-a", 16*mib)
	s1 := e.snap("csi-vol-a", id, "csi-snap-1")
	s2 := e.snap("csi-vol-a", id, "csi-snap-2")
	other := e.snap("csi-vol-b", e.image("csi-vol-b", 16*mib), "csi-snap-1")
	gone := volid.Snapshot{ClusterID: "c1", Pool: "rbd", ImageID: id, Snap: "csi-snap-gone"}.String()
	noImage := volid.Snapshot{ClusterID: "c1", Pool: "rbd", ImageID: "f999", Snap: "csi-snap-1"}.String()

	for _, c := range []struct {
		name string
		req  *csi.GetMetadataAllocatedRequest
		want codes.Code
	}{
		{"no ID", &csi.GetMetadataAllocatedRequest{}, codes.InvalidArgument},
		{"not an ID", &csi.GetMetadataAllocatedRequest{SnapshotId: "nonsense"}, codes.NotFound},
		{"no such image", &csi.GetMetadataAllocatedRequest{SnapshotId: noImage}, codes.NotFound},
		{"no such snapshot", &csi.GetMetadataAllocatedRequest{SnapshotId: gone}, codes.NotFound},
		{"negative offset", &csi.GetMetadataAllocatedRequest{SnapshotId: s1, StartingOffset: -1}, codes.OutOfRange},
		{"offset past the end", &csi.GetMetadataAllocatedRequest{SnapshotId: s1, StartingOffset: 16*mib + 1}, codes.OutOfRange},
		{"negative max_results", &csi.GetMetadataAllocatedRequest{SnapshotId: s1, MaxResults: -1}, codes.InvalidArgument},
	} {
		if _, err := e.allocated(c.req); status.Code(err) != c.want {
			t.Errorf("allocated, %s: %v, want %v", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name         string
		base, target string
		want         codes.Code
	}{
		{"no base", "", s2, codes.InvalidArgument},
		{"no target", s1, "", codes.InvalidArgument},
		{"base not an ID", "nonsense", s2, codes.NotFound},
		{"no such base", gone, s2, codes.NotFound},
		{"no such target", s1, gone, codes.NotFound},
		{"another volume's base", other, s2, codes.InvalidArgument},
		{"base not older", s2, s1, codes.InvalidArgument},
		{"base is target", s2, s2, codes.InvalidArgument},
	} {
		if _, err := e.delta(&csi.GetMetadataDeltaRequest{BaseSnapshotId: c.base, TargetSnapshotId: c.target}); status.Code(err) != c.want {
			t.Errorf("delta, %s: %v, want %v", c.name, err, c.want)
		}
	}
}

// member takes group snapshot gsnap of the group holding vol and makes its
// member as CreateVolumeGroupSnapshot does: a clone of the volume's image
// snapshot in the group namespace, marked with the group snapshot, and a
// snapshot of it, whose ID it returns.
func (e *env) member(vol, group, gsnap string) string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.ceph.CreateGroup(ctx, e.pool, group); err != nil && !errors.Is(err, rbd.ErrExists) {
		e.t.Fatal(err)
	}
	e.must(e.ceph.AddToGroup(ctx, e.pool, group, vol))
	gs, err := e.ceph.SnapshotGroup(ctx, e.pool, group, gsnap)
	e.must(err)
	image := "csi-member-" + gsnap
	e.must(e.ceph.Clone(ctx, e.pool, e.pool, image, rbd.CloneSpec{ParentImage: vol, ParentSnapID: gs.Members[0].SnapID,
		ImageSpec: rbd.ImageSpec{Metadata: records.GroupMemberMetadata(1, "group-snapshot-"+gsnap)}}))
	info, err := e.ceph.Stat(ctx, e.pool, image)
	e.must(err)
	return e.snap(image, info.ID, "csi-snap-"+gsnap)
}

// A group snapshot's members answer as snapshots of their volume: what
// one holds, and the deltas between members and between a member and one
// of the volume's own snapshots, either way round.
func TestGroupMembersAnswerAsTheirVolumesSnapshots(t *testing.T) {
	e := newEnv(t, 0)
	id := e.image("csi-vol-a", 32*mib)
	e.write("csi-vol-a", 0, mib)
	m1 := e.member("csi-vol-a", "grp", "g1")
	e.write("csi-vol-a", 8*mib, mib)
	s2 := e.snap("csi-vol-a", id, "csi-snap-2")
	e.write("csi-vol-a", 16*mib, mib)
	m3 := e.member("csi-vol-a", "grp", "g3")
	e.write("csi-vol-a", 24*mib, mib) // after both: in neither

	msgs, err := e.allocated(&csi.GetMetadataAllocatedRequest{SnapshotId: m1})
	e.must(err)
	equal(t, "allocated of a member", ranges(t, msgs, 32*mib), [][2]int64{{0, mib}})
	for _, c := range []struct {
		what, base, target string
		want               [][2]int64
	}{
		{"member to member", m1, m3, [][2]int64{{8 * mib, mib}, {16 * mib, mib}}},
		{"member to snapshot", m1, s2, [][2]int64{{8 * mib, mib}}},
		{"snapshot to member", s2, m3, [][2]int64{{16 * mib, mib}}},
	} {
		msgs, err := e.delta(&csi.GetMetadataDeltaRequest{BaseSnapshotId: c.base, TargetSnapshotId: c.target})
		e.must(err)
		equal(t, c.what, ranges(t, msgs, 32*mib), c.want)
	}
	other := e.snap("csi-vol-b", e.image("csi-vol-b", 32*mib), "csi-snap-1")
	for _, c := range []struct{ what, base, target string }{
		{"a later member as the base", m3, m1},
		{"a later snapshot as the base", s2, m1},
		{"another volume's snapshot", other, m3},
	} {
		if _, err := e.delta(&csi.GetMetadataDeltaRequest{BaseSnapshotId: c.base, TargetSnapshotId: c.target}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("delta, %s: %v, want InvalidArgument", c.what, err)
		}
	}
}
