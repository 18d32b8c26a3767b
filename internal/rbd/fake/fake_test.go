package fake_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/rbd/rbdtest"
)

// The fake passes the contract suite that real Ceph passes (e2e/contract).
func TestContract(t *testing.T) {
	rbdtest.Run(t, func(t *testing.T) rbdtest.Target { return target(fake.New(fake.Options{})) })
}

// So does a fake whose library lacks group snapshots, as Pacific and Reef
// do: their case says so and is skipped.
func TestContractWithoutGroupSnapshots(t *testing.T) {
	rbdtest.Run(t, func(t *testing.T) rbdtest.Target { return target(fake.New(fake.Options{NoGroupSnapshots: true})) })
}

func target(c *fake.Ceph) rbdtest.Target {
	poolless, rejected := cluster.Credentials{ID: "contract-poolless", Key: "AQBpb29sbGVzc3Bvb2xsZXNzcG9vbGxlc3M="}, cluster.Credentials{ID: "contract-rejected", Key: "AQByZWplY3RlZHJlamVjdGVkcmVqZWN0ZWQ="}
	c.DenyPools(poolless.ID)
	c.RejectUser(rejected.ID)
	c.SetPoolMirrorMode(pool.Name, "image")
	return rbdtest.Target{
		Poolless: poolless,
		Rejected: rejected,
		Backend:  c,
		Pool:     pool,
		Watch: func(t *testing.T, p rbd.Pool, image string) func() {
			unwatch, err := c.Watch(p, image)
			if err != nil {
				t.Fatal(err)
			}
			return unwatch
		},
		Map: func(t *testing.T, p rbd.Pool, image string) func() {
			m, err := c.Map(p, image)
			if err != nil {
				t.Fatal(err)
			}
			return m.Unmap
		},
		RemoveHeader: func(t *testing.T, p rbd.Pool, image string) {
			if err := c.RemoveHeader(p, image); err != nil {
				t.Fatal(err)
			}
		},
		DetachBehind: func(t *testing.T, p rbd.Pool, _, child string) {
			if err := c.DetachBehind(p, child); err != nil {
				t.Fatal(err)
			}
		},
		Blocklisted: func(*testing.T) []string { return slices.Collect(maps.Keys(c.Blocklisted())) },
	}
}

// pool is the contract's pool, used as the user client.csi-user.
var pool = rbd.Pool{MonHost: "fake", Name: "rbd", Cred: cluster.Credentials{ID: "csi-user"}}

// crash is what a fault hook raises to stop an operation at its point.
type crash string

// crashAt returns a fault hook that stops the operation at point, and
// survived, which runs an operation and reports whether it got past it.
func crashAt(point string) (fault func(string), survived func(op func()) bool) {
	fault = func(p string) {
		if p == point {
			panic(crash(p))
		}
	}
	survived = func(op func()) (ok bool) {
		defer func() {
			if r := recover(); r != nil {
				if _, ours := r.(crash); !ours {
					panic(r)
				}
				ok = false
			}
		}()
		op()
		return true
	}
	return fault, survived
}

// groupOf makes a group of two images, a and b.
func groupOf(t *testing.T, c *fake.Ceph, group string) {
	t.Helper()
	ctx := context.Background()
	for _, img := range []string{"a", "b"} {
		if err := c.CreateImage(ctx, pool, img, rbd.ImageSpec{Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CreateGroup(ctx, pool, group); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"a", "b"} {
		if err := c.AddToGroup(ctx, pool, group, img); err != nil {
			t.Fatal(err)
		}
	}
}

// A group snapshot left incomplete by a crash inside librbd is taken
// again: every image gets a snapshot, the stale one goes.
func TestIncompleteGroupSnapshotIsRetaken(t *testing.T) {
	ctx := context.Background()
	c := fake.New(fake.Options{})
	groupOf(t, c, "g")
	if err := c.IncompleteGroupSnap(pool, "g", "gs"); err != nil {
		t.Fatal(err)
	}
	_, stale, _ := c.Contents(pool)
	gs, err := c.SnapshotGroup(ctx, pool, "g", "gs")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs.Members) != 2 || gs.Members[0].Image != "a" || gs.Members[1].Image != "b" {
		t.Fatalf("retaken group snapshot: %+v", gs.Members)
	}
	_, snaps, _ := c.Contents(pool)
	if len(stale) != 1 || len(snaps) != 2 || slices.Contains(snaps, stale[0]) {
		t.Fatalf("snapshots %v after retaking the incomplete %v, want two new ones", snaps, stale)
	}
}

// A crash after taking a group snapshot: the retry returns it.
func TestSnapshotGroupCrash(t *testing.T) {
	ctx := context.Background()
	c := fake.New(fake.Options{})
	groupOf(t, c, "g")
	fault, survived := crashAt("SnapshotGroup:taken")
	if survived(func() { _, _ = c.Client(fault).SnapshotGroup(ctx, pool, "g", "gs") }) {
		t.Fatal("no crash at SnapshotGroup:taken")
	}
	_, before, _ := c.Contents(pool)
	gs, err := c.SnapshotGroup(ctx, pool, "g", "gs")
	if err != nil || len(gs.Members) != 2 {
		t.Fatalf("retry: %+v, %v", gs, err)
	}
	if _, after, _ := c.Contents(pool); !slices.Equal(before, after) {
		t.Fatalf("the retry took snapshots again: %v, then %v", before, after)
	}
}

// A crash at either point of RemoveGroup: the retry ends the work, and
// the images can go.
func TestRemoveGroupCrash(t *testing.T) {
	for _, point := range []string{"RemoveGroup:ungrouped", "RemoveGroup:unsnapped"} {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			c := fake.New(fake.Options{})
			groupOf(t, c, "g")
			if _, err := c.SnapshotGroup(ctx, pool, "g", "gs"); err != nil {
				t.Fatal(err)
			}
			fault, survived := crashAt(point)
			if survived(func() { _ = c.Client(fault).RemoveGroup(ctx, pool, "g") }) {
				t.Fatalf("no crash at %s", point)
			}
			if groups, err := c.ListGroups(ctx, pool); err != nil || !slices.Equal(groups, []string{"g"}) {
				t.Fatalf("groups after the crash: %v, %v; want g", groups, err)
			}
			if err := c.RemoveGroup(ctx, pool, "g"); err != nil {
				t.Fatal(err)
			}
			if groups, err := c.ListGroups(ctx, pool); err != nil || len(groups) != 0 {
				t.Fatalf("groups after the retry: %v, %v", groups, err)
			}
			for _, img := range []string{"a", "b"} {
				if err := c.RemoveImage(ctx, pool, img); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Another client of the cluster has the same library.
func TestClientKeepsNoGroupSnapshots(t *testing.T) {
	c := fake.New(fake.Options{NoGroupSnapshots: true})
	if err := c.Client(nil).GroupSnapshots(); !errors.Is(err, rbd.ErrNotSupported) {
		t.Fatalf("GroupSnapshots of another client: %v, want ErrNotSupported", err)
	}
}
