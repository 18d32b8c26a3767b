// Package contract runs the storage contract suite (internal/rbd/rbdtest)
// against real Ceph through the go-ceph backend the plugin uses, as the
// CSI user, in the cluster scripts/with-cluster.sh boots: the in-memory
// fake passes the same suite in make unit.
package contract

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
	"github.com/rbdcsi/rbdcsi/internal/rbd/rbdtest"
)

// TestMain fails the run if the suite left anything in the pool.
func TestMain(m *testing.M) { os.Exit(harness.CheckPoolAfter(m)) }

func TestContract(t *testing.T) {
	c := harness.LoadCluster(t)
	conns := ceph.NewConns(ceph.DefaultOptions())
	t.Cleanup(conns.Close)
	backend := ceph.NewBackend(conns, ceph.BackendOptions{})
	pool := rbd.Pool{MonHost: c.MonHost, Cred: cluster.Credentials{ID: c.CSIUser, Key: c.CSIKey}, Name: c.Pool, Namespace: c.Namespace}
	// The CSI user may add blocklist entries, not lift them: the node
	// plugins' user lifts its node's (docs/install.md#3-the-ceph-users).
	lifter := c.Name("rbdcsi-contract-lift")
	lifterKey := c.NewUser(t, lifter, "mon", `allow r, allow command "osd blocklist" with blocklistop=rm`)
	poolless := c.Name("rbdcsi-contract-poolless")
	// Caps on another pool: a user with no osd caps at all gets no answer
	// from Reef's and Tentacle's OSDs (its calls time out, as an outage
	// would), only Pacific's refuse it.
	poollessKey := c.NewUser(t, poolless, "mon", "profile rbd", "osd", "profile rbd pool=rbdcsi-no-such-pool")
	mirrorImages(t, c)
	rbdtest.Run(t, func(t *testing.T) rbdtest.Target {
		return rbdtest.Target{
			Backend:       backend,
			Pool:          pool,
			Watch:         func(t *testing.T, _ rbd.Pool, image string) func() { return watch(t, c, image, false) },
			Map:           func(t *testing.T, _ rbd.Pool, image string) func() { return watch(t, c, image, true) },
			RemoveHeader:  func(t *testing.T, _ rbd.Pool, image string) { c.RemoveHeader(t, image) },
			DetachBehind:  func(t *testing.T, _ rbd.Pool, parent, child string) { c.DetachBehindRBD(t, parent, child) },
			Blocklisted:   func(t *testing.T) []string { return slices.Collect(maps.Keys(c.Blocklist(t))) },
			Unblocklister: cluster.Credentials{ID: lifter, Key: lifterKey},
			Poolless:      cluster.Credentials{ID: poolless, Key: poollessKey},
			Rejected:      cluster.Credentials{ID: c.CSIUser, Key: wrongKey},
		}
	})
}

// mirrorImages sets the pool to mirror images one by one, as the suite
// needs, for as long as the test runs (a pool left so mirrors nothing
// more, but the next suite should find it as the cluster made it).
func mirrorImages(t *testing.T, c harness.Cluster) {
	args := append([]string{"mirror", "pool"}, c.NamespaceArgs()...)
	if out, err := c.RBD(append(append(args, "enable"), c.Pool, "image")...); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := c.RBD(append(append(args, "disable"), c.Pool)...); err != nil {
			t.Errorf("%v: %s", err, out)
		}
	})
}

// wrongKey is a well-formed cephx key that is no user's.
const wrongKey = "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="

// The monitors refuse a blocklist entry to a user without mon 'profile
// rbd' and its lift to one without blocklistop=rm; each refusal names the
// user and the cap the install guide gives for it.
func TestRefusedBlocklist(t *testing.T) {
	c := harness.LoadCluster(t)
	conns := ceph.NewConns(ceph.DefaultOptions())
	t.Cleanup(conns.Close)
	backend := ceph.NewBackend(conns, ceph.BackendOptions{})
	lifter := cluster.Credentials{ID: c.Name("rbdcsi-contract-refused")}
	lifter.Key = c.NewUser(t, lifter.ID, "mon", `allow r, allow command "osd blocklist" with blocklistop=rm`)
	csi := cluster.Credentials{ID: c.CSIUser, Key: c.CSIKey}
	const addr = "127.0.0.1:0/4242"
	t.Cleanup(func() { c.Unblocklist(t, addr) })
	for _, tc := range []struct {
		what string
		cred cluster.Credentials
		call func(context.Context) error
		cap  string
	}{
		{"Blocklist by the lifting user", lifter, func(ctx context.Context) error {
			return backend.Blocklist(ctx, c.MonHost, lifter, addr, time.Minute)
		}, cluster.CapMon},
		{"Unblocklist by the CSI user", csi, func(ctx context.Context) error { return backend.Unblocklist(ctx, c.MonHost, csi, addr) }, cluster.CapNodeMon},
	} {
		err := tc.call(harness.Ctx(t))
		if !errors.Is(err, rbd.ErrPermission) {
			t.Errorf("%s: %v, want a refusal", tc.what, err)
			continue
		}
		for _, w := range []string{"Ceph refused client." + tc.cred.ID + " on the monitors", tc.cap, cluster.CapsDoc} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.what, err, w)
			}
		}
		if strings.Contains(err.Error(), tc.cred.Key) {
			t.Errorf("%s: the error shows the key", tc.what)
		}
	}
}

// watch opens the image read-write on a connection of its own, which
// registers a watch on its header as a client that maps it does, and
// with write writes a block, which takes the exclusive lock.
func watch(t *testing.T, c harness.Cluster, image string, write bool) (unwatch func()) {
	ioctx, done := c.AdminIoctx(t)
	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
	if err != nil {
		done()
		t.Fatalf("opening %s: %v", image, err)
	}
	if write {
		if _, err := img.WriteAt(make([]byte, 4096), 0); err != nil {
			_ = img.Close()
			done()
			t.Fatalf("writing to %s: %v", image, err)
		}
	}
	closed := false
	return func() {
		if !closed {
			closed = true
			_ = img.Close()
			done()
		}
	}
}
