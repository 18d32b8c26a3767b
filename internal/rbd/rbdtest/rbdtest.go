// Package rbdtest is the contract suite of internal/rbd.Backend: every
// behaviour of Ceph the controller relies on, stated once and run against
// each implementation, the in-memory fake in `make unit`
// (internal/rbd/fake) and real Ceph in `make integration` (e2e/contract),
// so the fake cannot drift from the real thing unnoticed.
package rbdtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Target is a backend under test, a pool it may use, and ways to make the
// states that other clients, crashes and races leave behind.
type Target struct {
	Backend rbd.Backend
	// Pool exists and holds none of the suite's names (all start with
	// "contract-"); the suite removes what it makes. It mirrors images
	// one by one (rbd mirror pool enable POOL image) and has no peers.
	Pool rbd.Pool
	// Watch opens the image as another client does (a node that mapped
	// it) until unwatch is called.
	Watch func(t *testing.T, p rbd.Pool, image string) (unwatch func())
	// Map opens the image as another client and writes to it, as a
	// node's mapping does, so that it also takes the exclusive lock of an
	// image with that feature, until unmap is called.
	Map func(t *testing.T, p rbd.Pool, image string) (unmap func())
	// RemoveHeader leaves an image as an interrupted removal does:
	// listed in the pool, without its header.
	RemoveHeader func(t *testing.T, p rbd.Pool, image string)
	// DetachBehind unlinks the clone child from parent's trashed snapshot
	// as a detach that lost a race does: the snapshot stays, cloneless.
	DetachBehind func(t *testing.T, p rbd.Pool, parent, child string)
	// Blocklisted reads the cluster's blocklist (ceph osd blocklist ls):
	// the addresses on it.
	Blocklisted func(t *testing.T) []string
	// Unblocklister may lift blocklist entries, which Pool.Cred (the CSI
	// user, mon 'profile rbd') may only add.
	Unblocklister cluster.Credentials
	// Poolless is a user the monitors let in whose caps cover no pool
	// (mon 'profile rbd' alone); Rejected is one they refuse (a key that
	// is not the user's).
	Poolless, Rejected cluster.Credentials
}

// Run runs the suite; newTarget is called once per case.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	cases := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"CreateStatAndExists", testCreateStatAndExists},
		{"MissingImage", testMissingImage},
		{"Features", testFeatures},
		{"MissingPoolAndNamespace", testMissingPoolAndNamespace},
		{"MetadataResizeRename", testMetadataResizeRename},
		{"Snapshots", testSnapshots},
		{"ManySnapshots", testManySnapshots},
		{"Clone", testClone},
		{"TrashedSnapshotFollowsLastClone", testTrashedSnapshotFollowsLastClone},
		{"Flatten", testFlatten},
		{"Sparsify", testSparsify},
		{"WatcherBlocksRemoval", testWatcherBlocksRemoval},
		{"HalfRemovedImage", testHalfRemovedImage},
		{"CloneLessTrashedSnapshot", testCloneLessTrashedSnapshot},
		{"GroupSnapshots", testGroupSnapshots},
		{"Claims", testClaims},
		{"Omap", testOmap},
		{"Blocklist", testBlocklist},
		{"NetworkFences", testNetworkFences},
		{"UsedBytes", testUsedBytes},
		{"LockHolderOutlivesItsWatch", testLockHolderOutlivesItsWatch},
		{"Pools", testPools},
		{"Refusals", testRefusals},
		{"DataDiffAllocatedAndDelta", testDataDiffAllocatedAndDelta},
		{"DataDiffFromParent", testDataDiffFromParent},
		{"DataDiffAfterResize", testDataDiffAfterResize},
		{"DataDiffAfterDiscard", testDataDiffAfterDiscard},
		{"DataMissingAndInvalid", testDataMissingAndInvalid},
		{"DataDiffTakesNoLock", testDataDiffTakesNoLock},
		{"DataDiffByID", testDataDiffByID},
		{"Mirroring", testMirroring},
		{"MirroringAClone", testMirroringAClone},
		{"MirrorSchedules", testMirrorSchedules},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &suite{t: t, Target: newTarget(t), prefix: "contract-" + strings.ToLower(tc.name) + "-"}
			t.Cleanup(s.cleanup)
			tc.run(t, s)
		})
	}
}

// suite is one case's view of the target.
type suite struct {
	Target
	t       *testing.T
	prefix  string
	objects []string
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

// name is a name of this case's, which cleanup removes.
func (s *suite) name(n string) string { return s.prefix + n }

// object is name for a RADOS object, remembered for cleanup.
func (s *suite) object(n string) string {
	s.objects = append(s.objects, s.name(n))
	return s.name(n)
}

func (s *suite) must(err error, what string) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// wantErr checks that err wraps each of want.
func (s *suite) wantErr(err error, what string, want ...error) {
	s.t.Helper()
	if err == nil {
		s.t.Errorf("%s: no error, want %v", what, want)
		return
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			s.t.Errorf("%s: got %v, want %v", what, err, w)
		}
	}
}

func (s *suite) create(name string, size uint64, meta map[string]string) {
	s.t.Helper()
	s.must(s.Backend.CreateImage(s.ctx(), s.Pool, name, rbd.ImageSpec{Size: size, Features: []string{"layering"}, Metadata: meta}), "CreateImage "+name)
}

func (s *suite) family(name string) rbd.Family {
	s.t.Helper()
	f, err := s.Backend.StatFamily(s.ctx(), s.Pool, name, "")
	s.must(err, "StatFamily "+name)
	return f
}

func (s *suite) listed(name string) bool {
	s.t.Helper()
	names, err := s.Backend.ListImages(s.ctx(), s.Pool)
	s.must(err, "ListImages")
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// cleanup removes the case's groups (with their snapshots), images
// (clones before parents, snapshots first) and objects, whatever state a
// failure left them in. An image a dropped client still watches cannot go
// until the OSD lets the watch time out (30 s), so passes go on while
// anything is left, for a while.
func (s *suite) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, p := s.Backend, s.Pool
	groups, err := b.ListGroups(ctx, p)
	if err != nil && !errors.Is(err, rbd.ErrNotSupported) {
		s.t.Errorf("cleanup: %v", err)
	}
	for _, g := range groups {
		if strings.HasPrefix(g, s.prefix) {
			if err := b.RemoveGroup(ctx, p, g); err != nil {
				s.t.Errorf("cleanup of group %s: %v", g, err)
			}
		}
	}
	for {
		names, err := b.ListImages(ctx, p)
		if err != nil {
			s.t.Errorf("cleanup: %v", err)
			return
		}
		var left []string
		var lastErr error
		for _, n := range names {
			if !strings.HasPrefix(n, s.prefix) {
				continue
			}
			left = append(left, n)
			if f, err := b.StatFamily(ctx, p, n, ""); err == nil {
				if f.Mirror != nil {
					// A non-primary copy cannot be removed.
					_ = b.PromoteImage(ctx, p, n, true)
					_ = b.DisableMirroring(ctx, p, n)
				}
				for _, sn := range f.Snaps {
					_ = b.RemoveSnapshot(ctx, p, f.ID, sn.Name)
				}
			}
			if err := b.RemoveImage(ctx, p, n); err != nil {
				lastErr = err
			}
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			s.t.Errorf("cleanup could not remove %v: %v", left, lastErr)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	for _, o := range s.objects {
		if err := b.Unclaim(ctx, p, o); err != nil {
			s.t.Errorf("cleanup of object %s: %v", o, err)
		}
	}
}
