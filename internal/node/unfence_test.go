package node

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recordingUnfence records each lift with whether the image was still
// mapped at that moment.
type recordingUnfence struct {
	m      *fakeMapper
	lifts  []string // "<volumeID> <monHost> mapped|unmapped"
	fenced bool
	err    error
}

func (u *recordingUnfence) Lift(ctx context.Context, volumeID, monHost string) ([]string, bool, error) {
	state := "unmapped"
	if list, _ := u.m.List(ctx); len(list) > 0 {
		state = "mapped"
	}
	u.lifts = append(u.lifts, volumeID+" "+monHost+" "+state)
	return []string{"10.0.0.2:0/1"}, u.fenced, u.err
}

func (u *recordingUnfence) Fenced(context.Context, string) (bool, error) { return u.fenced, u.err }

type liftLog []error

func (l *liftLog) FenceLifted(err error) { *l = append(*l, err) }

func withUnfence(f *fixture) (*recordingUnfence, *liftLog) {
	u, log := &recordingUnfence{m: f.m, fenced: true}, &liftLog{}
	f.n.unfence, f.n.lifts = u, log
	return u, log
}

func (f *fixture) unstage(path string) error {
	_, err := f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: path})
	return err
}

// The fence is lifted after the unmap, on the volume's cluster, and only
// then: with or without a state record; never while the volume stays
// mapped (staged at another path, or an unmap that failed).
func TestUnstageLiftsTheFenceOnlyOnceUnmapped(t *testing.T) {
	f := newFixture(t)
	f.run.blkid = blkidEmpty
	u, log := withUnfence(f)
	req := f.stageReq(fsCap(rwo))
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := f.unstage(filepath.Join(f.dir, "elsewhere")); err != nil || len(u.lifts) != 0 {
		t.Fatalf("unstage at another path: %v, lifts %v", err, u.lifts)
	}
	f.m.unmapErr = errors.New("device busy")
	if err := f.unstage(req.StagingTargetPath); err == nil || len(u.lifts) != 0 {
		t.Fatalf("unstage whose unmap failed: %v, lifts %v", err, u.lifts)
	}
	f.m.unmapErr = nil
	if err := f.unstage(req.StagingTargetPath); err != nil {
		t.Fatal(err)
	}
	want := volID + " v2:10.0.0.1:3300 unmapped"
	if len(u.lifts) != 1 || u.lifts[0] != want {
		t.Fatalf("lifts %v, want [%s]", u.lifts, want)
	}
	if err := f.unstage(req.StagingTargetPath); err != nil || len(u.lifts) != 2 || u.lifts[1] != want {
		t.Fatalf("repeated unstage (no record): %v, lifts %v", err, u.lifts)
	}
	if len(*log) != 2 || (*log)[0] != nil {
		t.Fatalf("lifts observed: %v", *log)
	}
	if rec, err := f.n.store.load(volID); rec != nil || err != nil || len(f.m.mapped) != 0 {
		t.Fatalf("left: record %+v %v, mappings %v", rec, err, f.m.mapped)
	}
}

// A lift that fails leaves the unstage a success: the volume is unmapped,
// and the blocklist entries expire. No fence is nothing to report.
func TestFailedLiftStillUnstages(t *testing.T) {
	f := newFixture(t)
	u, log := withUnfence(f)
	u.err = status.Error(codes.PermissionDenied, "access denied")
	if err := f.unstage(filepath.Join(f.dir, "staging")); err != nil {
		t.Fatalf("unstage with a failing lift: %v", err)
	}
	if len(*log) != 1 || (*log)[0] == nil {
		t.Fatalf("lifts observed: %v", *log)
	}
	u.err, u.fenced = nil, false
	if err := f.unstage(filepath.Join(f.dir, "staging")); err != nil || len(*log) != 1 {
		t.Fatalf("unstage of an unfenced volume: %v, lifts observed %v", err, *log)
	}
}
