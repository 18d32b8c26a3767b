package addons_test

import (
	"context"
	"testing"
	"time"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// These tests run the replication service's judgement (which state calls
// for what, and which code a refusal gets) on the in-memory Ceph, whose
// hooks make what a peer site and rbd-mirror would. e2e/dr proves the
// same on two real clusters with real rbd-mirror daemons.

const (
	clusterID = "site-a"
	poolName  = "rbd"
	key       = "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="
	mib       = 1 << 20
)

type env struct {
	t     *testing.T
	ceph  *fake.Ceph
	pool  rbd.Pool
	locks *lock.Keyed
	r     *addons.Replication
}

// newEnv is a site whose pool mirrors images one by one and has a peer.
func newEnv(t *testing.T, o addons.Options) *env {
	// Copies become primary at this time, before the statuses below.
	c := fake.New(fake.Options{Pools: []string{poolName}, Now: func() time.Time { return promotedAt }})
	c.SetPoolMirrorMode(poolName, "image")
	c.PeerPool(poolName)
	e := &env{t: t, ceph: c, pool: rbd.Pool{MonHost: "127.0.0.1:3300", Name: poolName, Cred: cluster.Credentials{ID: "csi", Key: key}}, locks: lock.New()}
	o.Backend, o.Locks, o.Names = c, e.locks, records.NewNames("", nil)
	o.Clusters = cluster.NewStaticMap([]cluster.Cluster{{ClusterID: clusterID, Monitors: []string{"127.0.0.1:3300"}}})
	e.r = addons.New(o).Replication()
	return e
}

func secrets() map[string]string { return map[string]string{"userID": "csi", "userKey": key} }

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// volume makes an image and returns its volume ID.
func (e *env) volume(name string) string {
	e.t.Helper()
	must(e.t, e.ceph.CreateImage(ctx(e.t), e.pool, name, rbd.ImageSpec{Size: 8 * mib, Features: []string{"layering"}}), "CreateImage "+name)
	return volid.Volume{ClusterID: clusterID, Pool: poolName, Image: name}.String()
}

// mirrored makes a mirrored image, primary here, that the peer's daemon
// reports replaying.
func (e *env) mirrored(name string) string {
	e.t.Helper()
	id := e.volume(name)
	must(e.t, e.ceph.EnableMirroring(ctx(e.t), e.pool, name), "EnableMirroring "+name)
	e.status(name, rbd.MirrorStatus{Peers: []rbd.MirrorSiteStatus{replayingPeer}})
	return id
}

func (e *env) info(name string) rbd.MirrorInfo {
	e.t.Helper()
	info, err := e.ceph.MirrorInfo(ctx(e.t), e.pool, name)
	must(e.t, err, "MirrorInfo "+name)
	return info
}

func (e *env) schedules(name string) []rbd.MirrorSchedule {
	e.t.Helper()
	s, err := e.ceph.MirrorSchedules(ctx(e.t), e.pool, name)
	must(e.t, err, "MirrorSchedules "+name)
	return s
}

func (e *env) status(name string, st rbd.MirrorStatus) {
	e.t.Helper()
	must(e.t, e.ceph.SetMirrorStatus(e.pool, name, st), "SetMirrorStatus "+name)
}

func (e *env) enable(id string, params map[string]string) error {
	_, err := e.r.EnableVolumeReplication(ctx(e.t), &replication.EnableVolumeReplicationRequest{VolumeId: id, Parameters: params, Secrets: secrets()})
	return err
}

func (e *env) disable(id string) error {
	_, err := e.r.DisableVolumeReplication(ctx(e.t), &replication.DisableVolumeReplicationRequest{VolumeId: id, Secrets: secrets()})
	return err
}

func (e *env) promote(id string, force bool, params map[string]string) error {
	_, err := e.r.PromoteVolume(ctx(e.t), &replication.PromoteVolumeRequest{VolumeId: id, Force: force, Parameters: params, Secrets: secrets()})
	return err
}

func (e *env) demote(id string) error { return e.demoteWith(id, false) }

func (e *env) demoteWith(id string, force bool) error {
	_, err := e.r.DemoteVolume(ctx(e.t), &replication.DemoteVolumeRequest{VolumeId: id, Force: force, Secrets: secrets()})
	return err
}

func (e *env) resync(id string, force bool) (bool, error) {
	resp, err := e.r.ResyncVolume(ctx(e.t), &replication.ResyncVolumeRequest{VolumeId: id, Force: force, Secrets: secrets()})
	return resp.GetReady(), err
}

func (e *env) getInfo(id string, sec map[string]string) (*replication.GetVolumeReplicationInfoResponse, error) {
	return e.r.GetVolumeReplicationInfo(ctx(e.t), &replication.GetVolumeReplicationInfoRequest{VolumeId: id, Secrets: sec})
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

// promotedAt is the fake's clock: when its copies became primary.
var promotedAt = time.Unix(1796280000, 0)

// Statuses as Pacific's rbd-mirror writes them, after promotedAt.
var (
	replayingPeer = rbd.MirrorSiteStatus{MirrorUUID: "peer-b", State: rbd.SiteReplaying, Up: true, LastUpdate: time.Unix(1796284800, 0),
		Description: `replaying, {"bytes_per_second":419430.4,"bytes_per_snapshot":2097152.0,"last_snapshot_bytes":4194304,"last_snapshot_sync_seconds":2,"local_snapshot_timestamp":1796284779,"remote_snapshot_timestamp":1796284779,"replay_state":"idle"}`}
	primaryPeer = rbd.MirrorSiteStatus{MirrorUUID: "peer-b", State: rbd.SiteStopped, Up: true, LastUpdate: time.Unix(1796284800, 0), Description: "local image is primary"}
	// stalePrimaryPeer is the old primary's last report from before this
	// copy was promoted, which it has not updated yet.
	stalePrimaryPeer = rbd.MirrorSiteStatus{MirrorUUID: "peer-b", State: rbd.SiteStopped, Up: true, LastUpdate: promotedAt.Add(-time.Second), Description: "local image is primary"}
	downPeer         = rbd.MirrorSiteStatus{MirrorUUID: "peer-b", State: rbd.SiteStopped, LastUpdate: time.Unix(1796284800, 0), Description: "local image is primary"}
	localReplaying   = rbd.MirrorSiteStatus{State: rbd.SiteReplaying, Up: true, LastUpdate: time.Unix(1796284800, 0),
		Description: `replaying, {"last_snapshot_bytes":1024,"last_snapshot_sync_seconds":0,"local_snapshot_timestamp":1796284779,"remote_snapshot_timestamp":1796284779,"replay_state":"idle"}`}
	localSplit = rbd.MirrorSiteStatus{State: rbd.SiteError, Up: true, LastUpdate: time.Unix(1796284800, 0), Description: "split-brain"}
)
