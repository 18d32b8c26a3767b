package node

import (
	"bytes"
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/e2e/ranges"
)

// snapshot takes a snapshot of v and deletes it when the test ends.
func (e *env) snapshot(name string, v *csi.Volume) string {
	e.t.Helper()
	resp, err := e.cc.CreateSnapshot(ctx(e.t), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: v.VolumeId, Secrets: e.secrets()})
	harness.Must(e.t, err, "CreateSnapshot %s", name)
	id := resp.Snapshot.SnapshotId
	e.t.Cleanup(func() {
		_, err := e.cc.DeleteSnapshot(ctx(e.t), &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: e.secrets()})
		harness.Must(e.t, err, "DeleteSnapshot %s", name)
	})
	return id
}

// allocated and delta ask the plugin's SnapshotMetadata service, as the
// external-snapshot-metadata sidecar does.
func (e *env) allocated(snap string, size int64) []ranges.Range {
	e.t.Helper()
	s, err := csi.NewSnapshotMetadataClient(e.p.Conn).GetMetadataAllocated(ctx(e.t), &csi.GetMetadataAllocatedRequest{SnapshotId: snap, Secrets: e.secrets()})
	harness.Must(e.t, err, "GetMetadataAllocated")
	return ranges.Read(e.t, size, func() ([]*csi.BlockMetadata, int64, error) {
		r, err := s.Recv()
		return r.GetBlockMetadata(), r.GetVolumeCapacityBytes(), err
	})
}

func (e *env) delta(base, target string, size int64) []ranges.Range {
	e.t.Helper()
	s, err := csi.NewSnapshotMetadataClient(e.p.Conn).GetMetadataDelta(ctx(e.t), &csi.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target, Secrets: e.secrets()})
	harness.Must(e.t, err, "GetMetadataDelta")
	return ranges.Read(e.t, size, func() ([]*csi.BlockMetadata, int64, error) {
		r, err := s.Recv()
		return r.GetBlockMetadata(), r.GetVolumeCapacityBytes(), err
	})
}

// copyRanges copies the ranges from one device to another, as a backup
// and its restore move the ranges the service lists.
func copyRanges(t *testing.T, from, to string, rs []ranges.Range) {
	t.Helper()
	f, err := os.Open(from)
	harness.Must(t, err, "open %s", from)
	defer f.Close()
	for _, r := range rs {
		buf := make([]byte, r.N)
		_, err := f.ReadAt(buf, r.Off)
		harness.Must(t, err, "read %d bytes at %d of %s", r.N, r.Off, from)
		writeAt(t, to, r.Off, buf)
	}
}

func deviceBytes(t *testing.T, dev string, size int64) []byte {
	t.Helper()
	f, err := os.Open(dev)
	harness.Must(t, err, "open %s", dev)
	defer f.Close()
	buf := make([]byte, size)
	_, err = f.ReadAt(buf, 0)
	harness.Must(t, err, "read %s", dev)
	return buf
}

// An encrypted volume's backup, as a tool on changed-block tracking takes
// it: the ranges come in the offsets of the device the user writes (the
// LUKS header before it is left out), a full copy of the first snapshot
// from its allocated ranges plus the second's delta, written to another
// encrypted volume with a key of its own, reads as the second snapshot
// does. The copies are read from the source's device while it holds what
// the snapshot holds (nothing writes it between the snapshot and the
// copy): a restore of an encrypted snapshot is TestEncryptedRestoreAndClone's,
// and two more encrypted volumes cost minutes in the emulated guest. The
// volume is first written whole: a range never written reads as noise
// through dm-crypt, different under each key, and is no data of the user's.
func TestEncryptedBackupRoundTrip(t *testing.T) {
	e := setupCrypt(t)
	const size = 40 * mib
	const device = size - luksHeader
	c := blockCap(singleWriter)
	src := e.createVolume("cbt-src", size, c, encrypted("tenant-a")...)
	dev := e.mountAt(src, "src", c)
	backup := e.mountAt(e.createVolume("cbt-copy", size, c, encrypted("tenant-b")...), "copy", c)

	// Staged, the image holds its LUKS header and nothing of the user's.
	s0 := e.snapshot("cbt-s0", src)
	ranges.Equal(t, "allocated right after the format", e.allocated(s0, size), nil)

	want := pattern(device, "full")
	writeAt(t, dev, 0, want)
	s1 := e.snapshot("cbt-s1", src)
	full := e.allocated(s1, size)
	ranges.Equal(t, "allocated of the written volume", full, ranges.Of(0, device))
	copyRanges(t, dev, backup, full)

	changes := ranges.Of(mib+4096, 8192, 10*mib, mib, 20*mib-4096, 8192)
	for _, r := range changes {
		b := pattern(int(r.N), "change")
		writeAt(t, dev, r.Off, b)
		copy(want[r.Off:], b)
	}
	s2 := e.snapshot("cbt-s2", src)
	delta := e.delta(s1, s2, size)
	// Every object held data in s1: Ceph reports a rewrite to the byte.
	ranges.Equal(t, "delta", delta, changes)
	copyRanges(t, dev, backup, delta)

	got := deviceBytes(t, backup, device)
	if !bytes.Equal(got, want) {
		t.Fatalf("the copy made from the allocated ranges and the delta (%s) differs from snapshot 2 (written %s)", sum(got), sum(want))
	}
}
