package controller

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A plugin killed inside an operation, then restarted, converges on the
// retry to exactly one object and leaves nothing behind.
func TestCrashInsideOperationsConverges(t *testing.T) {
	c := harness.LoadCluster(t)
	secretDir := harness.WriteControllerSecretDir(t, c)
	start := func(crashAt string) env {
		args := []string{"--mode", "controller", "--controller-secret-dir", secretDir}
		if crashAt != "" {
			args = append(args, "--test-crash-at", crashAt)
		}
		p := harness.StartPlugin(t, c, args...)
		return env{c: c, p: p, cc: p.Controller()}
	}
	healthy := start("")
	src := healthy.mustCreate(t, "crash-src", 8*mib)
	snap, err := healthy.snapshot(t, "crash-base-snap", src.VolumeId)
	harness.Must(t, err, "snapshot")
	defer healthy.deleteSnapshot(t, snap.SnapshotId)

	for _, tc := range []struct {
		point string
		call  func(e env) (string, error)
	}{
		{"CreateImage:created", func(e env) (string, error) {
			r, err := e.create(t, "crash-vol", 8*mib)
			return volID(r), err
		}},
		{"CreateSnapshot:claimed", func(e env) (string, error) {
			s, err := e.snapshot(t, "crash-snap", src.VolumeId)
			if err != nil {
				return "", err
			}
			return s.SnapshotId, nil
		}},
		{"Clone:cloned", func(e env) (string, error) {
			v, err := e.createFrom(t, "crash-restore", 8*mib, fromSnapshot(snap.SnapshotId))
			if err != nil {
				return "", err
			}
			return v.VolumeId, nil
		}},
		{"CreateVolume:source-snapshot", func(e env) (string, error) {
			v, err := e.createFrom(t, "crash-clone", 8*mib, fromVolume(src.VolumeId))
			if err != nil {
				return "", err
			}
			return v.VolumeId, nil
		}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			before := len(healthy.c.Images(t))
			crashing := start(tc.point)
			if _, err := tc.call(crashing); err == nil {
				t.Fatalf("the call survived --test-crash-at %s", tc.point)
			} else if code := grpcstatus.Code(err); code != codes.Unavailable && code != codes.Internal {
				t.Fatalf("crash reported as %v", err)
			}
			id, err := tc.call(healthy)
			harness.Must(t, err, "retry after the crash")
			again, err := tc.call(healthy)
			harness.Must(t, err, "second retry")
			if again != id {
				t.Fatalf("retries disagree: %s, %s", id, again)
			}
			images := healthy.c.Images(t)
			if n := len(images) - before; n > 1 {
				t.Fatalf("%d new images after crash and retry: %v", n, images)
			}
			// The base snapshot, plus the new one for the snapshot case: no
			// leftover temporary clone snapshot.
			if names := snapNames(t, healthy, src.VolumeId); len(names) > 2 || (len(names) == 2 && id[0] != 's') {
				t.Fatalf("source has snapshots %v", names)
			}
			if id[0] == 's' {
				healthy.deleteSnapshot(t, id)
			} else {
				healthy.delete(t, id)
			}
		})
	}
	healthy.delete(t, src.VolumeId)
}

func volID(r *csi.CreateVolumeResponse) string {
	if r == nil {
		return ""
	}
	return r.Volume.VolumeId
}

// snapNames lists the RBD snapshots (user namespace) of a volume's image.
func snapNames(t *testing.T, e env, volumeID string) []string {
	out, err := e.c.RBD("snap", "ls", e.c.Pool+"/"+imageOf(t, volumeID))
	harness.Must(t, err, "rbd snap ls")
	var names []string
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i == 0 || line == "" {
			continue // header
		}
		names = append(names, line)
	}
	return names
}
