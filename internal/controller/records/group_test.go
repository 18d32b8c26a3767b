package records

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

func TestGroupRecord(t *testing.T) {
	ctx := context.Background()
	ceph := fake.New(fake.Options{Pools: []string{"rbd"}})
	pool := rbd.Pool{Name: "rbd"}
	g := NewGroups(ceph, NewNames("b", nil))
	const hash = "0123456789ab"
	if got := g.Object(hash); got != "rbdcsi.vgs.0123456789ab.b" {
		t.Errorf("record object %q", got)
	}
	if r, err := g.Read(ctx, pool, hash); err != nil || r.Exists {
		t.Fatalf("no record yet: %+v, %v", r, err)
	}
	if holder, err := g.Claim(ctx, pool, hash, "v1:c:rbd:a\nv1:c:rbd:b"); err != nil || holder != "v1:c:rbd:a\nv1:c:rbd:b" {
		t.Fatalf("claim: %q, %v", holder, err)
	}
	if holder, _ := g.Claim(ctx, pool, hash, "v1:c:rbd:other"); holder != "v1:c:rbd:a\nv1:c:rbd:b" {
		t.Fatalf("a second claim took the record: %q", holder)
	}
	started, taken := time.Unix(1700000000, 0), time.Unix(1700000001, 42)
	members := []GroupMember{{Snapshot: "s1:c:rbd:10ab:csi-snap-0123456789ab-0", Source: "v1:c:rbd:a", Size: 1 << 20}}
	for _, err := range []error{
		g.SetStarted(ctx, pool, hash, "group-1", started),
		g.SetTaken(ctx, pool, hash, taken),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := g.Read(ctx, pool, hash)
	if err != nil || !r.Exists || r.Complete() || r.Name != "group-1" || !r.Started.Equal(started) || !r.Taken.Equal(taken) {
		t.Fatalf("before its members: %+v, %v", r, err)
	}
	if err := g.SetMembers(ctx, pool, hash, members); err != nil {
		t.Fatal(err)
	}
	if r, err = g.Read(ctx, pool, hash); err != nil || !r.Complete() || !reflect.DeepEqual(r.Members, members) {
		t.Fatalf("with its members: %+v, %v", r, err)
	}
	if err := ceph.SetOmap(ctx, pool, g.Object(hash), map[string]string{recMembers: "{"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Read(ctx, pool, hash); !errors.Is(err, ErrCorruptRecord) {
		t.Errorf("a corrupt member list reads as %v", err)
	}
	if err := g.Remove(ctx, pool, hash); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Exists(ctx, pool, hash); err != nil || ok {
		t.Errorf("after Remove: %v, %v", ok, err)
	}
}
