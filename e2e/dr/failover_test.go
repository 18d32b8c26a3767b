package dr

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// Failover and failback, as the runbook does them (docs/disaster-recovery.md).
//
// Failover: A is cut off (every daemon of its cluster stopped) with
// writes that no mirror snapshot carried. B's promote without force says
// force is needed once A's daemon no longer reports; forced, B holds
// exactly the data of the last mirror snapshot that arrived whole,
// nothing newer.
//
// Failback: A comes back, still primary, holding its own last writes. The
// driver reports the two primaries (split-brain) and resyncs nothing by
// itself; demoted, A's copy diverged, and a resync without force is
// refused and changes nothing. With force, rbd-mirror replaces A's copy
// with B's data; then the volume relocates back to A without loss.
//
// It stops site a's daemons, so it runs alone: Go starts the parallel
// tests of the package once the others have ended.
func TestFailoverAndFailback(t *testing.T) {
	a, b := sites(t)
	const size = 16 * mib
	id := a.createVolume(t, b, "dr-failover", size)
	image := imageOf(t, id)
	harness.Must(t, a.enable(t, id, nil), "Enable on A")
	b.waitReplaying(t, image)

	synced := a.write(t, image, 2*mib, size)
	a.mirrorSnapshot(t, image)
	b.waitData(t, image, synced, "B holding the last mirror snapshot")
	b.waitReplaying(t, image)
	unsynced := a.write(t, image, 2*mib, size)
	if unsynced == synced {
		t.Fatal("the second write changed nothing")
	}

	resume := harness.PauseSite(t, a.c)
	var refusal error
	eventually(t, "B's promote without force saying force is needed", 3*time.Minute, func() (bool, string) {
		refusal = b.promote(t, id, false)
		switch status.Code(refusal) {
		case codes.FailedPrecondition:
			return true, ""
		case codes.Unavailable:
			return false, refusal.Error()
		}
		t.Fatalf("promote on B with A cut off: %v, want Unavailable until A's daemon is seen gone, then FailedPrecondition", refusal)
		return false, ""
	})
	if !strings.Contains(refusal.Error(), "needs force") {
		t.Errorf("the refusal does not say force is needed: %v", refusal)
	}
	harness.Must(t, b.promote(t, id, true), "Promote on B with force")
	if got := b.sum(t, image); got != synced {
		t.Fatalf("B after the failover reads %s, want the last mirror snapshot's data %s (A's unsynced writes: %s)", got, synced, unsynced)
	}
	afterFailover := b.write(t, image, 2*mib, size)
	b.mirrorSnapshot(t, image)

	// A comes back as a second primary.
	resume()
	idA := a.imageID(t, image)
	for _, s := range []*site{b, a} {
		eventually(t, "the split-brain reported at "+s.name, 3*time.Minute, func() (bool, string) {
			info, err := s.info(t, id)
			if err != nil {
				return false, err.Error()
			}
			return info.Status == replication.GetVolumeReplicationInfoResponse_ERROR && strings.Contains(info.StatusMessage, "split-brain"), info.String()
		})
		// The CSI volume health says so too (the external-health-monitor's
		// event on the PVC).
		eventually(t, "the split-brain in the volume health at "+s.name, time.Minute, func() (bool, string) {
			resp, err := s.cc.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: id, Secrets: s.secrets()})
			if err != nil {
				return false, err.Error()
			}
			for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
				if h.GetReason() == "MirrorSplitBrain" && h.GetStatus() == csi.VolumeHealthErrorType_DEGRADED {
					return true, ""
				}
			}
			return false, resp.String()
		})
	}
	if !a.primary(t, image) || a.imageID(t, image) != idA || a.sum(t, image) != unsynced {
		t.Fatal("A's copy changed by itself after it came back")
	}

	// Runbook: demote the copy whose writes are given up, A.
	harness.Must(t, a.demote(t, id), "Demote on A")
	eventually(t, "rbd-mirror reporting A's copy split-brained", 3*time.Minute, func() (bool, string) {
		ready, err := a.resync(t, id, false)
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "split-brain") {
			return true, ""
		}
		if err != nil || ready {
			t.Fatalf("Resync without force of the diverged copy: ready %v, %v", ready, err)
		}
		return false, "not ready, not reported yet"
	})
	if a.imageID(t, image) != idA || a.sum(t, image) != unsynced {
		t.Fatal("a resync without force changed A's copy")
	}
	ready, err := a.resync(t, id, true)
	if err != nil || ready {
		t.Fatalf("Resync with force: ready %v, %v; want started, not ready", ready, err)
	}
	eventually(t, "A's copy resynced", 3*time.Minute, func() (bool, string) {
		ready, err := a.resync(t, id, false)
		switch {
		case status.Code(err) == codes.NotFound:
			return false, "being replaced"
		// rbd-mirror makes the new copy first and enables its mirroring
		// after: for that moment it is a volume without replication
		// (docs/disaster-recovery.md, failback step 4).
		case status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "replication is not enabled"):
			return false, "being replaced, not mirrored yet"
		case err != nil:
			t.Fatalf("Resync while the copy is replaced: %v", err)
		}
		return ready, "not ready"
	})
	if a.imageID(t, image) == idA {
		t.Error("A's copy was not replaced")
	}
	a.waitData(t, image, afterFailover, "A holding B's data")

	// Relocate back to A.
	relocate(t, b, a, id, size, nil)
	b.waitReplaying(t, image)
	harness.Must(t, a.disable(t, id), "Disable on A")
	eventually(t, "B's copy removed", 2*time.Minute, func() (bool, string) { return !b.has(image), "still there" })
	_, err = a.cc.DeleteVolume(ctx(t), deleteReq(a, id))
	harness.Must(t, err, "DeleteVolume")
}
