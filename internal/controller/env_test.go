package controller_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// These tests run the controller's crash, sweep, reclaim, claim and
// clone-depth logic against the in-memory Ceph (internal/rbd/fake), which
// passes the same contract suite as real Ceph. e2e/controller proves the
// same against the real plugin and cluster.

const (
	mib       = 1 << 20
	clusterID = "fake-cluster"
	// peerClusterID is the clusterID a mirror peer gives its cluster,
	// which the map resolves to clusterID's entry.
	peerClusterID = "fake-peer"
	poolName      = "rbd"
	key           = "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="
)

// env is one fake cluster that controllers come and go on, as plugin
// processes on a real one.
type env struct {
	t    *testing.T
	ceph *fake.Ceph
	pool rbd.Pool
	// wrap, when set, wraps the backend of the controllers started next.
	wrap func(rbd.Backend) rbd.Backend
}

func newEnv(t *testing.T) *env {
	return &env{t: t, ceph: fake.New(fake.Options{Pools: []string{poolName}}), pool: rbd.Pool{Name: poolName}}
}

// ctrl is one controller "process" of the env and its client calls.
type ctrl struct {
	e *env
	c *controller.Controller
	// ceph is the process's own client of the cluster.
	ceph *fake.Ceph
}

// start runs a controller on the env's cluster; crashAt names the fault
// point at which it dies (its goroutine ends, its locks go, as with a
// process killed there). Options o are completed with the backend and
// cluster map.
func (e *env) start(crashAt string, o controller.Options) *ctrl {
	fault := func(point string) {
		if point == crashAt {
			runtime.Goexit()
		}
	}
	if crashAt == "" {
		fault = nil
	}
	client := e.ceph.Client(fault)
	o.Backend, o.Fault = client, fault
	if e.wrap != nil {
		o.Backend = e.wrap(o.Backend)
	}
	o.Clusters = cluster.NewStaticMap([]cluster.Cluster{{ClusterID: clusterID, Monitors: []string{"127.0.0.1:3300"}, PeerClusterIDs: []string{peerClusterID}}})
	c := controller.New(o)
	e.t.Cleanup(c.Close)
	return &ctrl{e: e, c: c, ceph: client}
}

// ownCreds are controller credentials for the calls without secrets.
func ownCreds() *cluster.Credentials { return &cluster.Credentials{ID: "csi", Key: key} }

func secrets() map[string]string { return map[string]string{"userID": "csi", "userKey": key} }

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func fsCaps() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}}
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func (c *ctrl) createFrom(t *testing.T, name string, src *csi.VolumeContentSource) (string, error) {
	resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
		Parameters: map[string]string{"clusterID": clusterID, "pool": poolName}, Secrets: secrets(), VolumeContentSource: src,
	})
	if err != nil {
		return "", err
	}
	return resp.Volume.VolumeId, nil
}

func (c *ctrl) create(t *testing.T, name string) (string, error) { return c.createFrom(t, name, nil) }

func (c *ctrl) mustCreate(t *testing.T, name string, src *csi.VolumeContentSource) string {
	t.Helper()
	id, err := c.createFrom(t, name, src)
	must(t, err, "CreateVolume "+name)
	return id
}

func (c *ctrl) snapshot(t *testing.T, name, src string) (string, error) {
	resp, err := c.c.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src, Secrets: secrets()})
	if err != nil {
		return "", err
	}
	return resp.Snapshot.SnapshotId, nil
}

func (c *ctrl) mustSnapshot(t *testing.T, name, src string) string {
	t.Helper()
	id, err := c.snapshot(t, name, src)
	must(t, err, "CreateSnapshot "+name)
	return id
}

func (c *ctrl) deleteVolume(ctx context.Context, id string) error {
	_, err := c.c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets()})
	return err
}

func (c *ctrl) delete(t *testing.T, id string) {
	t.Helper()
	must(t, c.deleteVolume(ctx(t), id), "DeleteVolume "+id)
}

func (c *ctrl) deleteSnapshot(t *testing.T, id string) {
	t.Helper()
	_, err := c.c.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: secrets()})
	must(t, err, "DeleteSnapshot "+id)
}

// restoredSnapshot makes prefix-src, its snapshot and a restore of it.
func (c *ctrl) restoredSnapshot(t *testing.T, prefix string) (src, snap, clone string) {
	t.Helper()
	src = c.mustCreate(t, prefix+"-src", nil)
	snap = c.mustSnapshot(t, prefix+"-snap", src)
	clone = c.mustCreate(t, prefix+"-clone", fromSnapshot(snap))
	return src, snap, clone
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

// crash runs call in a goroutine of its own, as a process of its own,
// and reports whether it died at its fault point instead of returning.
func crash(call func() error) (died bool, err error) {
	returned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = call()
		returned = true
	}()
	<-done
	return !returned, err
}

func imageOf(t *testing.T, volumeID string) string {
	v, err := volid.DecodeVolume(volumeID)
	must(t, err, "volume ID")
	return v.Image
}

func (e *env) images() []string {
	images, _, _ := e.ceph.Contents(e.pool)
	return images
}

func (e *env) hidden() []string {
	var hidden []string
	for _, img := range e.images() {
		if strings.HasPrefix(img, "csi-del-") {
			hidden = append(hidden, img)
		}
	}
	return hidden
}

// userSnaps lists an image's user snapshots.
func (e *env) userSnaps(t *testing.T, image string) []string {
	f, err := e.ceph.StatFamily(ctx(t), e.pool, image, "")
	must(t, err, "StatFamily "+image)
	var names []string
	for _, s := range f.Snaps {
		names = append(names, s.Name)
	}
	return names
}

// leaks lists what the pool holds beyond empty indexes (any instance's): images,
// snapshots (trashed ones too), objects, index entries.
func (e *env) leaks() []string {
	images, snaps, objects := e.ceph.Contents(e.pool)
	left := append(images, snaps...)
	for _, o := range objects {
		if base, _, _ := strings.Cut(strings.TrimPrefix(o, "rbdcsi."), "."); !strings.HasPrefix(o, "rbdcsi.") || base != "snapclaims" && base != "statictmp" {
			left = append(left, "object "+o)
			continue
		}
		entries, err := e.ceph.ListOmap(context.Background(), e.pool, o, "")
		if err != nil || len(entries) > 0 {
			left = append(left, fmt.Sprintf("%s entries %v %v", o, entries, err))
		}
	}
	return left
}

func (e *env) expectEmpty(t *testing.T) {
	t.Helper()
	if left := e.leaks(); len(left) > 0 {
		t.Fatalf("left in the pool: %v", left)
	}
}

// waitFor polls cond (background work: sweeps, flattens) for up to 2 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not so after 2 s: %s", what)
		}
	}
}

// upkeep records what the controller reports reclaiming.
type upkeep struct {
	mu        sync.Mutex
	reclaimed []string
	sweeps    int
	errs      []error
	fences    []error // one per fence, nil when it succeeded
}

func (u *upkeep) BackgroundTasks(string, int) {}
func (u *upkeep) Swept(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sweeps++
	if err != nil {
		u.errs = append(u.errs, err)
	}
}
func (u *upkeep) Reclaimed(what string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reclaimed = append(u.reclaimed, what)
}

func (u *upkeep) Rewrapped(string, error) {}
func (u *upkeep) Fenced(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fences = append(u.fences, err)
}
func (u *upkeep) RotationPassed(map[string]int, error) {}

func (u *upkeep) count(what string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, w := range u.reclaimed {
		if w == what {
			n++
		}
	}
	return n
}

func (u *upkeep) swept() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sweeps, errors.Join(u.errs...)
}
