package records

import (
	"context"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

func TestWorkIndex(t *testing.T) {
	ctx := context.Background()
	ceph := fake.New(fake.Options{Pools: []string{"rbd"}})
	pool := rbd.Pool{Name: "rbd"}
	x := NewWorkIndex(ceph, "rbdcsi.test")
	before := time.Now().Add(-time.Second)
	if err := x.Add(ctx, pool, "a", "img-1 req one"); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(ctx, pool, "b", ""); err != nil {
		t.Fatal(err)
	}
	if err := ceph.SetOmap(ctx, pool, "rbdcsi.test", map[string]string{"c": "garbage"}); err != nil {
		t.Fatal(err)
	}
	entries, err := x.List(ctx, pool)
	if err != nil || len(entries) != 3 {
		t.Fatalf("list: %v, %v", entries, err)
	}
	for _, e := range entries {
		switch e.Key {
		case "a":
			if e.Details != "img-1 req one" || e.At.Before(before) {
				t.Errorf("entry a: %+v", e)
			}
		case "b":
			if e.Details != "" || e.At.Before(before) {
				t.Errorf("entry b: %+v", e)
			}
		case "c":
			if !e.At.IsZero() {
				t.Errorf("a value without a time has one: %+v", e)
			}
		}
	}
	if err := x.Drop(ctx, pool, "a", "c"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := x.List(ctx, pool); len(entries) != 1 || entries[0].Key != "b" {
		t.Errorf("after drop: %v", entries)
	}
}

func TestClaims(t *testing.T) {
	ctx := context.Background()
	ceph := fake.New(fake.Options{Pools: []string{"rbd"}})
	pool := rbd.Pool{Name: "rbd"}
	n := NewNames("", nil)
	c := NewClaims(ceph, n)
	if err := c.Add(ctx, pool, "csi-snap-01", "10ab", "snap one"); err != nil {
		t.Fatal(err)
	}
	// An entry another writer left without details is listed, not ours to read.
	if err := ceph.SetOmap(ctx, pool, n.Object(claimIndex), map[string]string{"csi-snap-02": "garbage"}); err != nil {
		t.Fatal(err)
	}
	claims, err := c.List(ctx, pool)
	if err != nil || len(claims) != 2 {
		t.Fatalf("list: %v, %v", claims, err)
	}
	for _, cl := range claims {
		switch cl.Snap {
		case "csi-snap-01":
			if cl.ImageID != "10ab" || cl.Name != "snap one" || cl.At.IsZero() {
				t.Errorf("claim %+v", cl)
			}
		case "csi-snap-02":
			if !cl.At.IsZero() {
				t.Errorf("a value without a time has one: %+v", cl)
			}
		}
	}
	if err := c.Settle(ctx, pool, "csi-snap-01"); err != nil {
		t.Fatal(err)
	}
	if claims, _ := c.List(ctx, pool); len(claims) != 1 || claims[0].Snap != "csi-snap-02" {
		t.Errorf("after Settle: %v", claims)
	}
	if ClaimObject("csi-snap-01") != "rbdcsi.snap.csi-snap-01" {
		t.Errorf("claim object %q", ClaimObject("csi-snap-01"))
	}
}
