package addons_test

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-addons/spec/lib/go/replication"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The primary reports the oldest last sync of its peers, with its length
// and bytes, and the state: healthy while every peer replays, degraded
// while one does not report, an error when another copy is primary too.
func TestGetVolumeReplicationInfo(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	e.status("vol", rbd.MirrorStatus{})

	resp, err := e.getInfo(id, secrets())
	must(t, err, "GetVolumeReplicationInfo before any report")
	if resp.LastSyncTime != nil || resp.Status != replication.GetVolumeReplicationInfoResponse_UNKNOWN {
		t.Errorf("before any report: %v", resp)
	}

	older := replayingPeer
	older.MirrorUUID = "peer-c"
	older.Description = strings.Replace(older.Description, `"local_snapshot_timestamp":1796284779`, `"local_snapshot_timestamp":1796284700`, 1)
	e.status("vol", rbd.MirrorStatus{Peers: []rbd.MirrorSiteStatus{replayingPeer, older}})
	resp, err = e.getInfo(id, secrets())
	must(t, err, "GetVolumeReplicationInfo")
	if !resp.LastSyncTime.AsTime().Equal(time.Unix(1796284700, 0)) || resp.LastSyncDuration.AsDuration() != 2*time.Second || resp.LastSyncBytes != 4194304 ||
		resp.Status != replication.GetVolumeReplicationInfoResponse_HEALTHY {
		t.Errorf("two replaying peers: %v; want the older peer's sync, healthy", resp)
	}

	e.status("vol", rbd.MirrorStatus{Peers: []rbd.MirrorSiteStatus{replayingPeer, {MirrorUUID: "peer-c", State: rbd.SiteReplaying, LastUpdate: time.Unix(1796284700, 0)}}})
	resp, err = e.getInfo(id, secrets())
	must(t, err, "GetVolumeReplicationInfo")
	if resp.Status != replication.GetVolumeReplicationInfoResponse_DEGRADED || !strings.Contains(resp.StatusMessage, "peer-c does not report") {
		t.Errorf("a peer down: %v", resp)
	}

	e.status("vol", rbd.MirrorStatus{Peers: []rbd.MirrorSiteStatus{primaryPeer}})
	resp, err = e.getInfo(id, secrets())
	must(t, err, "GetVolumeReplicationInfo")
	if resp.Status != replication.GetVolumeReplicationInfoResponse_ERROR || !strings.Contains(resp.StatusMessage, "split-brain") {
		t.Errorf("a second primary: %v", resp)
	}
	// The old primary's report from before this copy's promotion is no
	// split-brain, only out of date.
	e.status("vol", rbd.MirrorStatus{Peers: []rbd.MirrorSiteStatus{stalePrimaryPeer}})
	resp, err = e.getInfo(id, secrets())
	must(t, err, "GetVolumeReplicationInfo")
	if resp.Status != replication.GetVolumeReplicationInfoResponse_DEGRADED || strings.Contains(resp.StatusMessage, "split-brain") {
		t.Errorf("a stale report of the old primary: %v", resp)
	}

	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", false), "MakeNonPrimary")
	_, err = e.getInfo(id, secrets())
	wantCode(t, err, codes.FailedPrecondition, "GetVolumeReplicationInfo at the non-primary copy")
	_, err = e.getInfo(e.volume("plain"), secrets())
	wantCode(t, err, codes.FailedPrecondition, "GetVolumeReplicationInfo of an image not mirrored")
	_, err = e.getInfo(id, nil)
	wantCode(t, err, codes.InvalidArgument, "GetVolumeReplicationInfo without secrets or credentials of its own")
}

// Without a Ceph user in the secrets, the calls act as the driver's own:
// the info is read, and replication enabled, with its credentials.
func TestReplicationOwnCredentials(t *testing.T) {
	e := newEnv(t, addons.Options{Credentials: &cluster.Credentials{ID: "csi", Key: key}})
	id := e.mirrored("vol")
	if _, err := e.getInfo(id, nil); err != nil {
		t.Fatalf("without secrets: %v", err)
	}
	other := e.volume("other")
	if _, err := e.r.EnableVolumeReplication(ctx(t), &replication.EnableVolumeReplicationRequest{VolumeId: other}); err != nil {
		t.Fatalf("EnableVolumeReplication without secrets: %v", err)
	}
	if e.info("other").Mode == "" {
		t.Error("replication of the volume enabled without secrets is off")
	}
}

// The requests' secrets are marked as CSI secrets, so the plugin's
// request log (protosanitizer) strips them.
func TestSecretsStrippedFromLogs(t *testing.T) {
	for _, req := range []any{
		&replication.EnableVolumeReplicationRequest{VolumeId: "v", Secrets: secrets()},
		&replication.PromoteVolumeRequest{VolumeId: "v", Secrets: secrets()},
		&replication.ResyncVolumeRequest{VolumeId: "v", Secrets: secrets()},
		&replication.GetVolumeReplicationInfoRequest{VolumeId: "v", Secrets: secrets()},
	} {
		if s := protosanitizer.StripSecrets(req).String(); strings.Contains(s, key) || !strings.Contains(s, `"v"`) {
			t.Errorf("%T logs as %s", req, s)
		}
	}
}
