package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

func (e env) snapshot(t *testing.T, name, src string) (*csi.Snapshot, error) {
	resp, err := e.cc.CreateSnapshot(harness.Ctx(t), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src, Secrets: e.c.Secrets()})
	if err != nil {
		return nil, err
	}
	return resp.Snapshot, nil
}

func (e env) deleteSnapshot(t *testing.T, id string) {
	t.Helper()
	_, err := e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: e.c.Secrets()})
	harness.Must(t, err, "DeleteSnapshot %s", id)
}

func (e env) createFrom(t *testing.T, name string, size int64, src *csi.VolumeContentSource) (*csi.Volume, error) {
	resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: fsCap(),
		Parameters: e.c.Params(), Secrets: e.c.Secrets(), VolumeContentSource: src,
	})
	if err != nil {
		return nil, err
	}
	return resp.Volume, nil
}

// restoredSnapshot makes prefix-src, its snapshot prefix-snap and the
// restore prefix-clone, 8 MiB each; the caller deletes them.
func (e env) restoredSnapshot(t *testing.T, prefix string) (src *csi.Volume, snap *csi.Snapshot, clone *csi.Volume) {
	t.Helper()
	src = e.mustCreate(t, prefix+"-src", 8*mib)
	snap, err := e.snapshot(t, prefix+"-snap", src.VolumeId)
	harness.Must(t, err, "snapshot")
	clone, err = e.createFrom(t, prefix+"-clone", 8*mib, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore")
	return src, snap, clone
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// write fills the first MiBs of an image with fresh data (rbd bench writes
// a pattern that differs from run to run) and returns the image checksum.
func (e env) write(t *testing.T, image string) string {
	t.Helper()
	if out, err := e.c.RBD("bench", "--io-type", "write", "--io-size", "1M", "--io-total", "4M", "--io-pattern", "seq", e.c.Pool+"/"+image); err != nil {
		t.Fatalf("rbd bench: %v: %s", err, out)
	}
	return e.checksum(t, image)
}

// checksum hashes the whole image (or image@snap) as rbd export reads it.
func (e env) checksum(t *testing.T, spec string) string {
	t.Helper()
	cmd := exec.Command("rbd", "-c", e.c.Conf, "--id", "admin", "export", e.c.Pool+"/"+spec, "-")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rbd export %s: %v", spec, err)
	}
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:])
}

// expectPoolEmpty asserts no image, trash entry, snapshot claim or image
// data is left in the pool.
func (e env) expectPoolEmpty(t *testing.T) {
	t.Helper()
	if left := e.c.PoolLeaks(); len(left) > 0 {
		t.Errorf("left in pool %s: %v", e.c.Pool, left)
	}
}

// depth counts an image's clone ancestors by following rbd info.
func (e env) depth(t *testing.T, image string) int {
	t.Helper()
	n := 0
	for ; n < 64; n++ {
		out, err := e.c.RBD("info", "--format", "json", e.c.Pool+"/"+image)
		if err != nil {
			t.Fatalf("rbd info %s: %v: %s", image, err, out)
		}
		var info struct {
			Parent *struct {
				Image string `json:"image"`
			} `json:"parent"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatal(err)
		}
		if info.Parent == nil {
			return n
		}
		image = info.Parent.Image
	}
	return n
}

func TestSnapshotIdempotencyAndConflicts(t *testing.T) {
	e := setup(t)
	a := e.mustCreate(t, "snap-src-a", 8*mib)
	b := e.mustCreate(t, "snap-src-b", 8*mib)
	s, err := e.snapshot(t, "snap-1", a.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	defer e.deleteSnapshot(t, s.SnapshotId)
	if !s.ReadyToUse || s.SizeBytes != 8*mib || s.SourceVolumeId != a.VolumeId || s.CreationTime.AsTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("snapshot %+v", s)
	}
	for i := 0; i < 3; i++ {
		again, err := e.snapshot(t, "snap-1", a.VolumeId)
		harness.Must(t, err, "repeat CreateSnapshot")
		if again.SnapshotId != s.SnapshotId || !again.CreationTime.AsTime().Equal(s.CreationTime.AsTime()) {
			t.Fatalf("repeat returned %+v, first %+v", again, s)
		}
	}
	_, err = e.snapshot(t, "snap-1", b.VolumeId)
	wantCode(t, err, codes.AlreadyExists, "same snapshot name, other source")
	_, err = e.snapshot(t, "snap-x", "v1:"+e.c.ClusterID+":rbd:csi-vol-00000000000000000000")
	wantCode(t, err, codes.NotFound, "missing source")
	_, err = e.snapshot(t, "", a.VolumeId)
	wantCode(t, err, codes.InvalidArgument, "no name")

	// Clone conflicts: same name with another source, or none.
	r, err := e.createFrom(t, "restore-1", 8*mib, fromSnapshot(s.SnapshotId))
	harness.Must(t, err, "restore")
	defer e.delete(t, r.VolumeId)
	if r.ContentSource.GetSnapshot().GetSnapshotId() != s.SnapshotId {
		t.Fatalf("content source not echoed: %+v", r.ContentSource)
	}
	again, err := e.createFrom(t, "restore-1", 8*mib, fromSnapshot(s.SnapshotId))
	harness.Must(t, err, "repeat restore")
	if again.VolumeId != r.VolumeId {
		t.Fatalf("repeat restore returned another volume")
	}
	_, err = e.createFrom(t, "restore-1", 8*mib, fromVolume(b.VolumeId))
	wantCode(t, err, codes.AlreadyExists, "same clone name, other source")
	_, err = e.create(t, "restore-1", 8*mib)
	wantCode(t, err, codes.AlreadyExists, "same clone name, no source")
	_, err = e.createFrom(t, "restore-small", 4*mib, fromSnapshot(s.SnapshotId))
	wantCode(t, err, codes.OutOfRange, "restore smaller than the snapshot")
	big, err := e.createFrom(t, "restore-big", 32*mib, fromSnapshot(s.SnapshotId))
	harness.Must(t, err, "larger restore")
	defer e.delete(t, big.VolumeId)
	if big.CapacityBytes != 32*mib {
		t.Fatalf("larger restore has %d bytes", big.CapacityBytes)
	}
	_, err = e.createFrom(t, "restore-missing", 8*mib, fromSnapshot("s1:"+e.c.ClusterID+":rbd:123456:csi-snap-0000000000000000"))
	wantCode(t, err, codes.NotFound, "restore from a missing snapshot")
}

func TestListSnapshotsPaginatesAndFilters(t *testing.T) {
	e := setup(t)
	a := e.mustCreate(t, "list-a", mib)
	b := e.mustCreate(t, "list-b", mib)
	ids := map[string]string{}
	for i := 0; i < 5; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		s, err := e.snapshot(t, fmt.Sprintf("list-snap-%d", i), src.VolumeId)
		harness.Must(t, err, "CreateSnapshot")
		ids[s.SnapshotId] = src.VolumeId
		defer e.deleteSnapshot(t, s.SnapshotId)
	}
	seen, token, pages := map[string]bool{}, "", 0
	for {
		resp, err := e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: token, Secrets: e.c.Secrets()})
		harness.Must(t, err, "ListSnapshots")
		for _, en := range resp.Entries {
			if seen[en.Snapshot.SnapshotId] || ids[en.Snapshot.SnapshotId] != en.Snapshot.SourceVolumeId {
				t.Fatalf("entry %+v repeated or with the wrong source", en.Snapshot)
			}
			seen[en.Snapshot.SnapshotId] = true
		}
		pages++
		if token = resp.NextToken; token == "" {
			break
		}
	}
	if len(seen) != 5 || pages != 3 {
		t.Fatalf("%d snapshots over %d pages", len(seen), pages)
	}
	resp, err := e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{SourceVolumeId: b.VolumeId, Secrets: e.c.Secrets()})
	harness.Must(t, err, "ListSnapshots by source")
	if len(resp.Entries) != 2 {
		t.Fatalf("%d snapshots of volume b, want 2", len(resp.Entries))
	}
	for id := range ids {
		resp, err := e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{SnapshotId: id, Secrets: e.c.Secrets()})
		harness.Must(t, err, "ListSnapshots by ID")
		if len(resp.Entries) != 1 || resp.Entries[0].Snapshot.SnapshotId != id {
			t.Fatalf("by ID %s: %+v", id, resp.Entries)
		}
		break
	}
	resp, err = e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{SnapshotId: "nonsense", Secrets: e.c.Secrets()})
	if err != nil || len(resp.Entries) != 0 {
		t.Fatalf("unknown snapshot ID: %v, %v", resp, err)
	}
	_, err = e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{StartingToken: "bad", Secrets: e.c.Secrets()})
	wantCode(t, err, codes.Aborted, "bad token")
}

// Every order of deleting a source volume, its snapshot and a clone of the
// snapshot must work for the user and end with nothing left in the pool.
func TestDeleteOrderIndependence(t *testing.T) {
	orders := map[string][]string{
		"source first":   {"source", "snapshot", "clone"},
		"snapshot first": {"snapshot", "source", "clone"},
		"clone first":    {"clone", "snapshot", "source"},
		"source, clone":  {"source", "clone", "snapshot"},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			src, err := e.create(t, "order-src", 8*mib)
			harness.Must(t, err, "create source")
			sum := e.write(t, imageOf(t, src.Volume.VolumeId))
			snap, err := e.snapshot(t, "order-snap", src.Volume.VolumeId)
			harness.Must(t, err, "snapshot")
			clone, err := e.createFrom(t, "order-clone", 8*mib, fromSnapshot(snap.SnapshotId))
			harness.Must(t, err, "restore")
			volClone, err := e.createFrom(t, "order-volclone", 8*mib, fromVolume(src.Volume.VolumeId))
			harness.Must(t, err, "clone volume")
			e.write(t, imageOf(t, src.Volume.VolumeId)) // the source moves on
			snapGone := false
			for _, step := range order {
				switch step {
				case "source":
					e.delete(t, src.Volume.VolumeId)
					if snapGone {
						break
					}
					// The snapshot stays restorable after its source is gone.
					late, err := e.createFrom(t, "order-late", 8*mib, fromSnapshot(snap.SnapshotId))
					harness.Must(t, err, "restore after source deletion")
					if got := e.checksum(t, imageOf(t, late.VolumeId)); got != sum {
						t.Errorf("restore after source deletion has other data")
					}
					e.delete(t, late.VolumeId)
				case "snapshot":
					e.deleteSnapshot(t, snap.SnapshotId)
					snapGone = true
				case "clone":
					if got := e.checksum(t, imageOf(t, clone.VolumeId)); got != sum {
						t.Errorf("the restored volume lost its data")
					}
					if got := e.checksum(t, imageOf(t, volClone.VolumeId)); got != sum {
						t.Errorf("the volume clone lost its data")
					}
					e.delete(t, clone.VolumeId)
					e.delete(t, volClone.VolumeId)
				}
			}
			e.expectPoolEmpty(t)
		})
	}
}

// Restore from restore from restore... past the soft and hard depths: every
// volume stays readable with the original data, no chain ever grows past
// the hard depth, and in the end none is past the soft one.
func TestCloneChainsStayBounded(t *testing.T) {
	const soft, hard = 1, 2
	c := harness.LoadCluster(t)
	p := harness.StartPlugin(t, c, "--mode", "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, c),
		"--clone-depth-soft", fmt.Sprint(soft), "--clone-depth-hard", fmt.Sprint(hard))
	e := env{c: c, p: p, cc: p.Controller()}
	base, err := e.create(t, "chain-0", 8*mib)
	harness.Must(t, err, "create base")
	sum := e.write(t, imageOf(t, base.Volume.VolumeId))
	vols := []string{base.Volume.VolumeId}
	var snaps []string
	for i := 1; i <= 5; i++ {
		s, err := e.snapshot(t, fmt.Sprintf("chain-snap-%d", i), vols[i-1])
		harness.Must(t, err, "snapshot level %d", i)
		snaps = append(snaps, s.SnapshotId)
		var v *csi.Volume
		deadline := time.Now().Add(2 * time.Minute)
		for {
			v, err = e.createFrom(t, fmt.Sprintf("chain-%d", i), 8*mib, fromSnapshot(s.SnapshotId))
			if err == nil || grpcstatus.Code(err) != codes.Aborted || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // a flatten is running: retry as the sidecar would
		}
		harness.Must(t, err, "restore level %d", i)
		vols = append(vols, v.VolumeId)
		if got := e.checksum(t, imageOf(t, v.VolumeId)); got != sum {
			t.Fatalf("level %d lost the data", i)
		}
		if d := e.depth(t, imageOf(t, v.VolumeId)); d > hard {
			t.Fatalf("level %d returned with %d clone ancestors, over the hard depth %d", i, d, hard)
		}
	}
	// Background flattens bring every chain within the soft depth.
	deadline := time.Now().Add(2 * time.Minute)
	for _, v := range vols {
		for e.depth(t, imageOf(t, v)) > soft {
			if time.Now().After(deadline) {
				t.Fatalf("%s stays deeper than %d", v, soft)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := e.checksum(t, imageOf(t, v)); got != sum {
			t.Fatalf("%s lost its data while flattening", v)
		}
	}
	for i := len(vols) - 1; i >= 0; i-- {
		if i < len(snaps) {
			e.deleteSnapshot(t, snaps[i])
		}
		e.delete(t, vols[i])
	}
	e.expectPoolEmpty(t)
}

// Past --max-snapshots-per-image a volume takes no more snapshots (krbd
// cannot map an image with too large a snapshot context), nor clones,
// which need a snapshot of their own.
func TestSnapshotLimit(t *testing.T) {
	c := harness.LoadCluster(t)
	p := harness.StartPlugin(t, c, "--mode", "controller", "--max-snapshots-per-image", "2")
	e := env{c: c, p: p, cc: p.Controller()}
	v := e.mustCreate(t, "limited", 8*mib)
	for i := 0; i < 2; i++ {
		s, err := e.snapshot(t, fmt.Sprintf("limited-%d", i), v.VolumeId)
		harness.Must(t, err, "snapshot %d", i)
		defer e.deleteSnapshot(t, s.SnapshotId)
	}
	_, err := e.snapshot(t, "limited-2", v.VolumeId)
	wantCode(t, err, codes.ResourceExhausted, "a snapshot past the limit")
	_, err = e.createFrom(t, "limited-clone", 8*mib, fromVolume(v.VolumeId))
	wantCode(t, err, codes.ResourceExhausted, "a clone past the limit")
	// The refused name stays free for another source.
	w := e.mustCreate(t, "unlimited", 8*mib)
	s, err := e.snapshot(t, "limited-2", w.VolumeId)
	harness.Must(t, err, "the refused name on another volume")
	e.deleteSnapshot(t, s.SnapshotId)
}

// Clones of a deleted snapshot of a deleted volume, deleted at the same
// time: the last one gone must take the kept data with it.
func TestConcurrentCloneDeletesReclaim(t *testing.T) {
	e := setup(t)
	for round := 0; round < 3; round++ {
		src, err := e.create(t, fmt.Sprintf("cc-src-%d", round), 8*mib)
		harness.Must(t, err, "create source")
		snap, err := e.snapshot(t, fmt.Sprintf("cc-snap-%d", round), src.Volume.VolumeId)
		harness.Must(t, err, "snapshot")
		var clones []string
		for i := 0; i < 3; i++ {
			v, err := e.createFrom(t, fmt.Sprintf("cc-clone-%d-%d", round, i), 8*mib, fromSnapshot(snap.SnapshotId))
			harness.Must(t, err, "restore")
			clones = append(clones, v.VolumeId)
		}
		e.delete(t, src.Volume.VolumeId)
		e.deleteSnapshot(t, snap.SnapshotId)
		// t.FailNow (harness.Must) may only run on the test's goroutine:
		// the deletes report their errors back to it.
		errs := make(chan error, len(clones))
		var wg sync.WaitGroup
		for _, id := range clones {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.c.Secrets()})
				if err != nil {
					err = fmt.Errorf("DeleteVolume %s: %w", id, err)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			harness.Must(t, err, "concurrent clone delete")
		}
		e.expectPoolEmpty(t)
	}
}
