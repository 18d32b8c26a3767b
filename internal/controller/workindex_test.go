package controller

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
	x := workIndex{backend: ceph, object: "rbdcsi.test"}
	before := time.Now().Add(-time.Second)
	if err := x.add(ctx, pool, "a", "img-1 req one"); err != nil {
		t.Fatal(err)
	}
	if err := x.add(ctx, pool, "b", ""); err != nil {
		t.Fatal(err)
	}
	if err := ceph.SetOmap(ctx, pool, "rbdcsi.test", map[string]string{"c": "garbage"}); err != nil {
		t.Fatal(err)
	}
	entries, err := x.list(ctx, pool)
	if err != nil || len(entries) != 3 {
		t.Fatalf("list: %v, %v", entries, err)
	}
	for _, e := range entries {
		switch e.key {
		case "a":
			if e.details != "img-1 req one" || e.at.Before(before) {
				t.Errorf("entry a: %+v", e)
			}
		case "b":
			if e.details != "" || e.at.Before(before) {
				t.Errorf("entry b: %+v", e)
			}
		case "c":
			if !e.at.IsZero() {
				t.Errorf("a value without a time has one: %+v", e)
			}
		}
	}
	if err := x.drop(ctx, pool, "a", "c"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := x.list(ctx, pool); len(entries) != 1 || entries[0].key != "b" {
		t.Errorf("after drop: %v", entries)
	}
}
