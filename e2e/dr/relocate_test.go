package dr

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A planned relocation loses nothing: the volume is written on A, A is
// demoted (its last mirror snapshot carries every write), B is promoted
// once that snapshot has arrived, without force, and B reads exactly what
// A last held; then the same back to A. The volume keeps its ID, which
// each site's cluster map resolves. GetVolumeReplicationInfo at the
// primary reports each completed sync.
func TestPlannedRelocation(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	a, b := sites(t)
	const size = 32 * mib
	id := a.createVolume(t, b, "dr-relocate", size)
	image := imageOf(t, id)
	class := map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1h", "schedulingStartTime": "00:30"}
	harness.Must(t, a.enable(t, id, class), "Enable on A")
	harness.Must(t, a.enable(t, id, class), "Enable on A again")
	a.wantSchedule(t, image, "every 1h starting at 00:30:00")
	b.waitReplaying(t, image)

	// (d) The primary reports the sync of the first mirror snapshot, then
	// of the next one, with what it copied.
	first := waitSynced(t, a, id, time.Time{})
	start := time.Now().Truncate(time.Second)
	written := a.write(t, image, 4*mib, size)
	a.mirrorSnapshot(t, image)
	next := waitSynced(t, a, id, start)
	if !next.LastSyncTime.AsTime().After(first.LastSyncTime.AsTime()) || next.LastSyncBytes <= 0 || next.LastSyncDuration == nil ||
		next.Status != replication.GetVolumeReplicationInfoResponse_HEALTHY {
		t.Errorf("after a write and a sync: %v, want a later sync than %v that copied bytes, healthy", next, first)
	}
	b.waitData(t, image, written, "B holding the synced write")

	// Writes after the last mirror snapshot reach B only through the
	// demotion's own snapshot.
	relocate(t, a, b, id, size, class)
	if a.primary(t, image) || !b.primary(t, image) {
		t.Fatalf("after relocation: A primary %v, B primary %v", a.primary(t, image), b.primary(t, image))
	}
	// The new primary's snapshots come from a schedule of its own (the
	// mgr keys them by image ID, which differs on each site).
	b.wantSchedule(t, image, "every 1h starting at 00:30:00")
	_, err := a.info(t, id)
	wantCode(t, err, codes.FailedPrecondition, "GetVolumeReplicationInfo at the demoted copy")

	// And back at once: the demote waits until A replays from B (else A
	// would never copy the demotion, nor B's writes), the promote until
	// the demotion has arrived.
	relocate(t, b, a, id, size, class)
	b.waitReplaying(t, image)

	// Disabled at the primary, the copy on B goes, and the volume is
	// deleted as any other.
	harness.Must(t, a.disable(t, id), "Disable on A")
	eventually(t, "B's copy removed", 2*time.Minute, func() (bool, string) { return !b.has(image), "still there" })
	_, err = a.cc.DeleteVolume(ctx(t), deleteReq(a, id))
	harness.Must(t, err, "DeleteVolume")
}

// wantSchedule checks the image's own mirror snapshot schedules.
func (s *site) wantSchedule(t *testing.T, image, want string) {
	t.Helper()
	out, err := s.c.RBD("mirror", "snapshot", "schedule", "ls", "--pool", s.c.Pool, "--image", image)
	if err != nil || strings.TrimSpace(out) != want {
		t.Errorf("site %s: the image's schedules are %q (%v), want %q", s.name, out, err, want)
	}
}

// waitSynced polls GetVolumeReplicationInfo at the primary until it
// reports a completed sync of a snapshot taken at since or later.
func waitSynced(t *testing.T, s *site, id string, since time.Time) *replication.GetVolumeReplicationInfoResponse {
	t.Helper()
	var resp *replication.GetVolumeReplicationInfoResponse
	eventually(t, "a sync reported on site "+s.name, 2*time.Minute, func() (bool, string) {
		var err error
		resp, err = s.info(t, id)
		if err != nil {
			t.Fatalf("GetVolumeReplicationInfo on site %s: %v", s.name, err)
		}
		ts := resp.GetLastSyncTime()
		return ts != nil && !ts.AsTime().Before(since), fmt.Sprint(resp)
	})
	return resp
}

// relocate moves the volume from one site to the other as the runbook's
// planned relocation does (docs/disaster-recovery.md): a last write on
// from that no mirror snapshot carried yet, a demote on from once a peer
// replays the image, a promote on to without force once the demotion has
// arrived (with class, the class's parameters); to must then read
// exactly what from last held: the demotion carried every write.
func relocate(t *testing.T, from, to *site, id string, size int, class map[string]string) {
	t.Helper()
	image := imageOf(t, id)
	last := from.write(t, image, 2*mib, size)
	from.demoteWhenPulled(t, id)
	to.promoteWhenArrived(t, id, class)
	if got := to.sum(t, image); got != last {
		t.Fatalf("site %s after the relocation from %s reads %s; %s last held %s", to.name, from.name, got, from.name, last)
	}
}
