package fake_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/rbd/rbdtest"
)

// The fake passes the contract suite that real Ceph passes (e2e/contract).
func TestContract(t *testing.T) {
	rbdtest.Run(t, func(t *testing.T) rbdtest.Target {
		c := fake.New(fake.Options{})
		return rbdtest.Target{
			Backend: c,
			Pool:    rbd.Pool{MonHost: "fake", Name: "rbd"},
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
	})
}
