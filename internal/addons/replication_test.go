package addons_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Every bad request gets its code and changes nothing.
func TestBadRequests(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.volume("vol")
	other := volid.Volume{ClusterID: "site-x", Pool: poolName, Image: "vol"}.String()
	missing := volid.Volume{ClusterID: clusterID, Pool: poolName, Image: "nothing"}.String()
	for _, tc := range []struct {
		what string
		req  *replication.EnableVolumeReplicationRequest
		code codes.Code
	}{
		{"no volume ID", &replication.EnableVolumeReplicationRequest{Secrets: secrets()}, codes.InvalidArgument},
		{"a malformed ID", &replication.EnableVolumeReplicationRequest{VolumeId: "v9:x", Secrets: secrets()}, codes.NotFound},
		{"a cluster not in the map", &replication.EnableVolumeReplicationRequest{VolumeId: other, Secrets: secrets()}, codes.InvalidArgument},
		{"a missing image", &replication.EnableVolumeReplicationRequest{VolumeId: missing, Secrets: secrets()}, codes.NotFound},
		{"no secrets", &replication.EnableVolumeReplicationRequest{VolumeId: id}, codes.InvalidArgument},
		{"journal mode", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"mirroringMode": "journal"}}, codes.InvalidArgument},
		{"another mode", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"mirroringMode": "both"}}, codes.InvalidArgument},
		{"a bad interval", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"schedulingInterval": "1w"}}, codes.InvalidArgument},
		{"a bad start time", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"schedulingInterval": "1h", "schedulingStartTime": "noon"}}, codes.InvalidArgument},
		{"a start time alone", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"schedulingStartTime": "14:00"}}, codes.InvalidArgument},
		{"an unknown parameter", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), Parameters: map[string]string{"schedulingIntervall": "1h"}}, codes.InvalidArgument},
		{"a volume group", &replication.EnableVolumeReplicationRequest{Secrets: secrets(), ReplicationSource: &replication.ReplicationSource{
			Type: &replication.ReplicationSource_Volumegroup{Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "g"}}}}, codes.Unimplemented},
		{"a source naming another volume", &replication.EnableVolumeReplicationRequest{VolumeId: id, Secrets: secrets(), ReplicationSource: &replication.ReplicationSource{
			Type: &replication.ReplicationSource_Volume{Volume: &replication.ReplicationSource_VolumeSource{VolumeId: missing}}}}, codes.InvalidArgument},
	} {
		_, err := e.r.EnableVolumeReplication(ctx(t), tc.req)
		wantCode(t, err, tc.code, tc.what)
		if tc.req.Secrets != nil && strings.Contains(err.Error(), key) {
			t.Errorf("%s: the error shows the key", tc.what)
		}
	}
	if e.info("vol").Enabled() {
		t.Fatal("a refused enable mirrored the image")
	}
	// The source alone names the volume.
	_, err := e.r.EnableVolumeReplication(ctx(t), &replication.EnableVolumeReplicationRequest{Secrets: secrets(), Parameters: map[string]string{addons.ParamMirroringMode: "snapshot"}, ReplicationSource: &replication.ReplicationSource{
		Type: &replication.ReplicationSource_Volume{Volume: &replication.ReplicationSource_VolumeSource{VolumeId: id}}}})
	must(t, err, "Enable by the replication source")
	if !e.info("vol").Enabled() {
		t.Fatal("not mirrored")
	}
}

// Enable mirrors the image and gives it the class's schedule, once
// however often it is asked; a class without one leaves the image none
// of its own. A pool that mirrors no single images is refused.
func TestEnable(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.volume("vol")
	hourly := map[string]string{"schedulingInterval": "1h", "schedulingStartTime": "14:00"}
	must(t, e.enable(id, hourly), "Enable")
	if info := e.info("vol"); !info.Enabled() || !info.Primary || info.Mode != rbd.MirrorModeSnapshot {
		t.Fatalf("after enable: %+v", info)
	}
	snaps := e.ceph.MirrorSnapshots(e.pool, "vol")
	must(t, e.enable(id, hourly), "Enable again")
	want := []rbd.MirrorSchedule{{Interval: "1h", StartTime: "14:00:00"}}
	if got := e.schedules("vol"); !slices.Equal(got, want) {
		t.Fatalf("schedules %v, want %v", got, want)
	}
	if e.ceph.MirrorSnapshots(e.pool, "vol") != snaps {
		t.Error("a repeated enable took a mirror snapshot")
	}
	must(t, e.enable(id, map[string]string{"schedulingInterval": "5m"}), "Enable with another interval")
	if got := e.schedules("vol"); !slices.Equal(got, []rbd.MirrorSchedule{{Interval: "5m"}}) {
		t.Fatalf("schedules %v, want only 5m", got)
	}
	must(t, e.enable(id, nil), "Enable without a schedule")
	if got := e.schedules("vol"); len(got) != 0 {
		t.Fatalf("schedules %v, want none", got)
	}

	e.ceph.SetPoolMirrorMode(poolName, "")
	other := e.volume("other")
	err := e.enable(other, nil)
	wantCode(t, err, codes.FailedPrecondition, "Enable in a pool that mirrors no single images")
	if !strings.Contains(err.Error(), "rbd mirror pool enable") {
		t.Errorf("the refusal does not say how to set the pool up: %v", err)
	}
	if e.info("other").Enabled() {
		t.Fatal("mirrored anyway")
	}
}

// A clone whose parent is not mirrored is refused, saying to flatten it;
// flattened, it is mirrored.
func TestEnableAClone(t *testing.T) {
	e := newEnv(t, addons.Options{})
	e.volume("parent")
	must(t, e.ceph.CreateSnapshot(ctx(t), e.pool, "parent", "snap"), "CreateSnapshot")
	must(t, e.ceph.Clone(ctx(t), e.pool, e.pool, "clone", rbd.CloneSpec{ParentImage: "parent", ParentSnap: "snap", ImageSpec: rbd.ImageSpec{Features: []string{"layering"}}}), "Clone")
	id := volid.Volume{ClusterID: clusterID, Pool: poolName, Image: "clone"}.String()
	err := e.enable(id, nil)
	wantCode(t, err, codes.FailedPrecondition, "Enable of a clone of a parent not mirrored")
	if !strings.Contains(err.Error(), "rbd flatten rbd/clone") {
		t.Errorf("the refusal does not say how to flatten: %v", err)
	}
	if e.info("clone").Enabled() {
		t.Fatal("mirrored anyway")
	}
	must(t, e.ceph.Flatten(ctx(t), e.pool, "clone"), "Flatten")
	must(t, e.enable(id, nil), "Enable of the flattened clone")
}

// Disable turns mirroring off at the primary with its schedules; at a
// non-primary copy it is refused; on an image not mirrored it is done.
func TestDisable(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.volume("vol")
	must(t, e.disable(id), "Disable of an image not mirrored")
	must(t, e.enable(id, map[string]string{"schedulingInterval": "1h"}), "Enable")
	must(t, e.ceph.MakeNonPrimary(e.pool, "vol", false), "MakeNonPrimary")
	wantCode(t, e.disable(id), codes.FailedPrecondition, "Disable of a non-primary copy")
	if !e.info("vol").Enabled() || len(e.schedules("vol")) != 1 {
		t.Fatal("a refused disable changed the image")
	}
	must(t, e.ceph.PromoteImage(ctx(t), e.pool, "vol", true), "PromoteImage")
	must(t, e.disable(id), "Disable")
	must(t, e.disable(id), "Disable again")
	if e.info("vol").Enabled() || len(e.schedules("vol")) != 0 {
		t.Fatalf("after disable: %+v, schedules %v", e.info("vol"), e.schedules("vol"))
	}
}

// Demote demotes the primary once; a non-primary copy is left as it is;
// an image not mirrored is refused.
func TestDemote(t *testing.T) {
	e := newEnv(t, addons.Options{})
	plain := e.volume("plain")
	wantCode(t, e.demote(plain), codes.FailedPrecondition, "Demote of an image not mirrored")
	id := e.mirrored("vol")
	before := e.ceph.MirrorSnapshots(e.pool, "vol")
	must(t, e.demote(id), "Demote")
	if e.info("vol").Primary || e.ceph.MirrorSnapshots(e.pool, "vol") != before+1 {
		t.Fatalf("after demote: %+v with %d mirror snapshots, want non-primary with one more (the demotion's)", e.info("vol"), e.ceph.MirrorSnapshots(e.pool, "vol"))
	}
	must(t, e.demote(id), "Demote again")
	if e.ceph.MirrorSnapshots(e.pool, "vol") != before+1 {
		t.Fatal("a repeated demote took another snapshot")
	}
}

// A demote waits until a peer will copy the demotion: a peer whose
// daemon does not report replaying the image would never copy it, and the
// last writes would stay behind. A peer that is primary itself (a
// split-brain the demote ends) or force lets it through.
func TestDemoteWaitsForAPeerThatPulls(t *testing.T) {
	e := newEnv(t, addons.Options{})
	for _, tc := range []struct {
		what  string
		peers []rbd.MirrorSiteStatus
		force bool
		code  codes.Code
	}{
		{"no peer reporting", nil, false, codes.Unavailable},
		{"a peer starting", []rbd.MirrorSiteStatus{{MirrorUUID: "peer-b", State: rbd.SiteStartingReplay, Up: true}}, false, codes.Unavailable},
		{"a peer down", []rbd.MirrorSiteStatus{{MirrorUUID: "peer-b", State: rbd.SiteReplaying, Description: replayingPeer.Description}}, false, codes.Unavailable},
		{"a peer replaying", []rbd.MirrorSiteStatus{replayingPeer}, false, codes.OK},
		{"a peer primary itself", []rbd.MirrorSiteStatus{primaryPeer}, false, codes.OK},
		{"a peer's stale report of being primary", []rbd.MirrorSiteStatus{stalePrimaryPeer}, false, codes.Unavailable},
		{"force, no peer reporting", nil, true, codes.OK},
	} {
		name := strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(tc.what)
		id := e.mirrored(name)
		e.status(name, rbd.MirrorStatus{Peers: tc.peers})
		err := e.demoteWith(id, tc.force)
		wantCode(t, err, tc.code, "Demote with "+tc.what)
		if primary := e.info(name).Primary; primary != (tc.code != codes.OK) {
			t.Errorf("Demote with %s: primary %v after %v", tc.what, primary, err)
		}
	}
}

// Concurrent calls on one volume: the second is Aborted at once, also
// when the controller holds the volume (the shared locks).
func TestOneCallPerVolume(t *testing.T) {
	e := newEnv(t, addons.Options{})
	id := e.mirrored("vol")
	release, ok := e.locks.TryLock("vol/" + id)
	if !ok {
		t.Fatal("lock taken")
	}
	wantCode(t, e.demote(id), codes.Aborted, "Demote while the volume is busy")
	release()
	must(t, e.demote(id), "Demote once free")
}
