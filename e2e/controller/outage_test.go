package controller

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// With the monitor unreachable, every call answers Unavailable or
// DeadlineExceeded within its deadline; once it is back, the same calls
// succeed and nothing is duplicated.
func TestMonitorOutage(t *testing.T) {
	c := harness.LoadCluster(t)
	c.NeedsWholeCluster(t) // the monitor stops
	warm := setup(t)
	victim := warm.mustCreate(t, "outage-victim", 8*mib)

	// A fresh plugin must connect through the monitor.
	p := harness.StartPlugin(t, c, "--mode", "controller", "--ceph-timeout", "3s")
	cold := env{c: c, p: p, cc: p.Controller()}
	calls := map[string]func(ctx context.Context) error{
		"CreateVolume": func(ctx context.Context) error {
			_, err := cold.cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "outage-new", VolumeCapabilities: fsCap(),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, Parameters: c.Params(), Secrets: c.Secrets()})
			return err
		},
		"CreateSnapshot": func(ctx context.Context) error {
			_, err := cold.cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "outage-snap", SourceVolumeId: victim.VolumeId, Secrets: c.Secrets()})
			return err
		},
		"DeleteVolume": func(ctx context.Context) error {
			_, err := cold.cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: victim.VolumeId, Secrets: c.Secrets()})
			return err
		},
	}
	order := []string{"CreateVolume", "CreateSnapshot", "DeleteVolume"}
	resume := harness.PauseMonitor(t, c)
	for _, name := range order {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		start := time.Now()
		err := calls[name](ctx)
		cancel()
		took := time.Since(start)
		if code := grpcstatus.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("%s during the outage: %v (want Unavailable or DeadlineExceeded)", name, err)
		}
		if took > 12*time.Second {
			t.Errorf("%s during the outage took %v, past its 8 s deadline", name, took)
		}
	}
	resume()

	// The same calls now succeed, once each. The snapshot first: the
	// victim is deleted last and kept (hidden) for it.
	for _, name := range order {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := calls[name](ctx)
		cancel()
		harness.Must(t, err, "%s after the outage", name)
	}
	if imgs := c.Images(t); len(imgs) != 2 { // outage-new, and the victim kept for its snapshot
		t.Fatalf("images after the outage: %v", imgs)
	}
	snaps, err := cold.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{Secrets: c.Secrets()})
	harness.Must(t, err, "ListSnapshots")
	if len(snaps.Entries) != 1 {
		t.Fatalf("snapshots after the outage: %v", snaps.Entries)
	}
	cold.deleteSnapshot(t, snaps.Entries[0].Snapshot.SnapshotId)
	r, err := cold.create(t, "outage-new", 8*mib)
	harness.Must(t, err, "CreateVolume repeat")
	cold.delete(t, r.Volume.VolumeId)
}
