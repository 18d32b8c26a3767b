package dr

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

func deleteReq(s *site, id string) *csi.DeleteVolumeRequest {
	return &csi.DeleteVolumeRequest{VolumeId: id, Secrets: s.secrets()}
}

// Calls that would change a mirrored volume the wrong way answer a clear
// status and change nothing: no copy turns primary, none is replaced,
// none loses its mirroring. Calls the spec makes idempotent (promote of
// the primary, demote of a copy, a readiness check of a healthy copy)
// answer OK and change nothing either. The non-primary copy gives no
// snapshot, restore or clone.
func TestRefusals(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	a, b := sites(t)
	id := a.createVolume(t, b, "dr-refusals", 8*mib)
	image := imageOf(t, id)

	for _, tc := range []struct {
		what   string
		id     string
		params map[string]string
		sec    bool
		code   codes.Code
	}{
		{"journal mode", id, map[string]string{"mirroringMode": "journal"}, true, codes.InvalidArgument},
		{"a bad interval", id, map[string]string{"schedulingInterval": "90s"}, true, codes.InvalidArgument},
		{"an unknown parameter", id, map[string]string{"schedulingintervall": "1h"}, true, codes.InvalidArgument},
		{"no secrets", id, nil, false, codes.InvalidArgument},
		{"a malformed volume ID", "not-a-volume", nil, true, codes.NotFound},
		{"an unknown cluster", "v1:nowhere:rbd:" + image, nil, true, codes.InvalidArgument},
		{"a missing image", "v1:" + a.c.ClusterID + ":rbd:csi-vol-missing", nil, true, codes.NotFound},
	} {
		req := enableReq(a, tc.id, tc.params, tc.sec)
		_, err := a.rep.EnableVolumeReplication(ctx(t), req)
		wantCode(t, err, tc.code, "Enable with "+tc.what)
	}
	if out, _ := a.c.RBD("info", a.c.Pool+"/"+image); strings.Contains(out, "mirroring state: enabled") {
		t.Fatal("a refused enable mirrored the volume")
	}

	harness.Must(t, a.enable(t, id, nil), "Enable")
	b.waitReplaying(t, image)
	// B learns that A is alive and primary from A's rbd-mirror, which
	// reports into B's pool.
	eventually(t, "A's daemon reporting on B", 2*time.Minute, func() (bool, string) {
		st := b.status(t, image)
		for _, p := range st.PeerSites {
			if p.State == "up+stopped" && p.Description == "local image is primary" {
				return true, ""
			}
		}
		return false, st.State
	})
	snapsA, idB := mirrorSnaps(t, a, image), b.imageID(t, image)

	harness.Must(t, a.promote(t, id, false), "Promote of the primary")
	harness.Must(t, b.demote(t, id), "Demote of the non-primary copy")
	ready, err := b.resync(t, id, false)
	if err != nil || !ready {
		t.Errorf("Resync (no force) of a copy in step: ready %v, %v; want ready", ready, err)
	}
	ready, err = b.resync(t, id, true)
	if err != nil || !ready {
		t.Errorf("Resync (force) of a copy in step: ready %v, %v; want ready and nothing done", ready, err)
	}
	_, err = a.resync(t, id, true)
	wantCode(t, err, codes.FailedPrecondition, "Resync of the primary")
	wantCode(t, b.disable(t, id), codes.FailedPrecondition, "Disable at the non-primary copy")
	wantCode(t, b.promote(t, id, false), codes.Unavailable, "Promote while A is primary and alive")
	err = b.promote(t, id, true)
	wantCode(t, err, codes.FailedPrecondition, "a forced promote while A is primary and alive")
	if !strings.Contains(err.Error(), "refusing to force") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	_, err = b.info(t, id)
	wantCode(t, err, codes.FailedPrecondition, "GetVolumeReplicationInfo at the non-primary copy")

	if !a.primary(t, image) || b.primary(t, image) || b.imageID(t, image) != idB || mirrorSnaps(t, a, image) != snapsA {
		t.Fatalf("the refusals changed the copies: A primary %v, B primary %v, B's ID %s (was %s), A's mirror snapshots %d (were %d)",
			a.primary(t, image), b.primary(t, image), b.imageID(t, image), idB, mirrorSnaps(t, a, image), snapsA)
	}
	if !strings.Contains(b.status(t, image).State, "replaying") {
		t.Fatalf("B's copy no longer replays: %+v", b.status(t, image))
	}

	// (c) On B the volume ID resolves to B's copy, which is not primary:
	// no snapshot, restore or clone of it.
	_, err = b.cc.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "dr-refused-snap", SourceVolumeId: id, Secrets: b.secrets()})
	wantCode(t, err, codes.FailedPrecondition, "CreateSnapshot of the non-primary copy")
	_, err = b.cc.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "dr-refused-clone", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, Parameters: b.c.Params(), Secrets: b.secrets(),
		VolumeCapabilities:  []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}},
	})
	wantCode(t, err, codes.FailedPrecondition, "a clone of the non-primary copy")
	if clone := b.c.VolumeImage("dr-refused-clone"); b.has(clone) {
		t.Fatalf("the refused clone left %s on site B", clone)
	}
	_, err = b.cc.DeleteVolume(ctx(t), deleteReq(b, id))
	wantCode(t, err, codes.FailedPrecondition, "DeleteVolume of the non-primary copy")
	if !b.has(image) {
		t.Fatal("a refused delete removed B's copy")
	}
	if out, err := b.c.RBD("snap", "ls", b.c.Pool+"/"+image); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("B's copy has user snapshots %q (%v)", out, err)
	}
	// The primary serves them.
	snap, err := a.cc.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "dr-primary-snap", SourceVolumeId: id, Secrets: a.secrets()})
	harness.Must(t, err, "CreateSnapshot of the primary")
	_, err = a.cc.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId, Secrets: a.secrets()})
	harness.Must(t, err, "DeleteSnapshot")

	harness.Must(t, a.disable(t, id), "Disable")
	eventually(t, "B's copy removed", 2*time.Minute, func() (bool, string) { return !b.has(image), "still there" })
	_, err = a.cc.DeleteVolume(ctx(t), deleteReq(a, id))
	harness.Must(t, err, "DeleteVolume")
}

// mirrorSnaps counts the mirror snapshots of the site's copy.
func mirrorSnaps(t *testing.T, s *site, image string) int {
	out, err := s.c.RBD("snap", "ls", "--all", s.c.Pool+"/"+image)
	harness.Must(t, err, "snap ls --all")
	return strings.Count(out, ".mirror.")
}

func enableReq(s *site, id string, params map[string]string, withSecrets bool) *replication.EnableVolumeReplicationRequest {
	req := &replication.EnableVolumeReplicationRequest{VolumeId: id, Parameters: params}
	if withSecrets {
		req.Secrets = s.secrets()
	}
	return req
}
