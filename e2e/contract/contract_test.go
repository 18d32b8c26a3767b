// Package contract runs the storage contract suite (internal/rbd/rbdtest)
// against real Ceph through the go-ceph backend the plugin uses, as the
// CSI user, in the cluster scripts/with-cluster.sh boots: the in-memory
// fake passes the same suite in make unit.
package contract

import (
	"maps"
	"os"
	"slices"
	"testing"

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
		}
	})
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
