package rbdtest

import (
	"maps"
	"slices"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The first claim of an object wins and every claim answers its holder;
// a withdrawn claim can be made anew.
func testClaims(t *testing.T, s *suite) {
	b, p, ctx, obj := s.Backend, s.Pool, s.ctx(), s.object("claim")
	if _, ok, err := b.ClaimHolder(ctx, p, obj); err != nil || ok {
		t.Fatalf("ClaimHolder before any claim: ok %v, %v", ok, err)
	}
	holder, err := b.Claim(ctx, p, obj, "image-a")
	s.must(err, "Claim")
	if holder != "image-a" {
		t.Fatalf("first claim held by %q", holder)
	}
	if holder, err := b.Claim(ctx, p, obj, "image-b"); err != nil || holder != "image-a" {
		t.Fatalf("second claim: %q, %v; want the first's holder", holder, err)
	}
	if holder, ok, err := b.ClaimHolder(ctx, p, obj); err != nil || !ok || holder != "image-a" {
		t.Fatalf("ClaimHolder: %q, %v, %v", holder, ok, err)
	}
	s.must(b.Unclaim(ctx, p, obj), "Unclaim")
	s.must(b.Unclaim(ctx, p, obj), "Unclaim of a missing claim")
	if _, ok, err := b.ClaimHolder(ctx, p, obj); err != nil || ok {
		t.Fatalf("ClaimHolder after Unclaim: ok %v, %v", ok, err)
	}
	if holder, err := b.Claim(ctx, p, obj, "image-b"); err != nil || holder != "image-b" {
		t.Fatalf("claim after Unclaim: %q, %v", holder, err)
	}
}

// Omap keys are set, read one by one and by prefix, and removed; a
// missing object or key reads as absent, never as an error.
func testOmap(t *testing.T, s *suite) {
	b, p, ctx, obj := s.Backend, s.Pool, s.ctx(), s.object("omap")
	if got, err := b.ListOmap(ctx, p, obj, ""); err != nil || len(got) != 0 {
		t.Fatalf("ListOmap of a missing object: %v, %v", got, err)
	}
	if _, ok, err := b.GetOmap(ctx, p, obj, "k"); err != nil || ok {
		t.Fatalf("GetOmap of a missing object: ok %v, %v", ok, err)
	}
	s.must(b.RemoveOmapKeys(ctx, p, obj, "k"), "RemoveOmapKeys of a missing object")
	s.must(b.SetOmap(ctx, p, obj, map[string]string{"node.a": "1", "node.b": "2", "other": "3"}), "SetOmap")
	s.must(b.SetOmap(ctx, p, obj, map[string]string{"node.b": "4"}), "SetOmap again")
	if v, ok, err := b.GetOmap(ctx, p, obj, "node.b"); err != nil || !ok || v != "4" {
		t.Fatalf("GetOmap: %q, %v, %v", v, ok, err)
	}
	if _, ok, err := b.GetOmap(ctx, p, obj, "missing"); err != nil || ok {
		t.Fatalf("GetOmap of a missing key: ok %v, %v", ok, err)
	}
	got, err := b.ListOmap(ctx, p, obj, "node.")
	s.must(err, "ListOmap")
	if want := map[string]string{"node.a": "1", "node.b": "4"}; !maps.Equal(got, want) {
		t.Fatalf("ListOmap(node.) = %v, want %v", got, want)
	}
	s.must(b.RemoveOmapKeys(ctx, p, obj, "node.a", "missing"), "RemoveOmapKeys")
	got, err = b.ListOmap(ctx, p, obj, "")
	s.must(err, "ListOmap")
	if want := map[string]string{"node.b": "4", "other": "3"}; !maps.Equal(got, want) {
		t.Fatalf("ListOmap after removal = %v, want %v", got, want)
	}
}

// The pool is listed among the cluster's, sorted, with room to write.
func testPools(t *testing.T, s *suite) {
	b, p, ctx := s.Backend, s.Pool, s.ctx()
	pools, err := b.ListPools(ctx, p.MonHost, p.Cred)
	s.must(err, "ListPools")
	if !slices.Contains(pools, p.Name) || !slices.IsSorted(pools) {
		t.Fatalf("ListPools = %v, want a sorted list with %s", pools, p.Name)
	}
	avail, err := b.PoolAvailable(ctx, p)
	s.must(err, "PoolAvailable")
	if avail <= 0 {
		t.Fatalf("PoolAvailable = %d", avail)
	}
	if h, err := b.PoolHealth(ctx, p); err != nil || h != (rbd.PoolHealth{}) {
		t.Fatalf("PoolHealth = %+v, %v; want a pool that is neither full nor nearly full", h, err)
	}
}
