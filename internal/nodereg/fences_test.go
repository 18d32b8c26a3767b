package nodereg

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// blocklist is an in-memory blocklist whose Unblocklist can fail.
type blocklist struct {
	entries map[string]bool
	err     error
}

func (b *blocklist) Unblocklist(_ context.Context, _ string, _ cluster.Credentials, addr string) error {
	if b.err != nil {
		return b.err
	}
	delete(b.entries, addr)
	return nil
}

func fencedRegistry(t *testing.T) (*Registry, memStore, *time.Time) {
	t.Helper()
	store := memStore{}
	r := New(store, rbd.Pool{Cred: cluster.Credentials{ID: "rbdcsi-node"}}, "", time.Minute)
	now := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return now }
	return r, store, &now
}

// A retried detach joins its fence with the one recorded: every address,
// the later expiry. Each node sees only its own.
func TestAddFenceJoins(t *testing.T) {
	r, store, now := fencedRegistry(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.AddFence(ctx, "n1", "v1:c:p:a", Fence{Addrs: []string{"10.0.0.1:0/2"}, Expires: now.Add(time.Hour)}))
	must(r.AddFence(ctx, "n1", "v1:c:p:a", Fence{Addrs: []string{"10.0.0.1:0/1", "10.0.0.1:0/2"}, Expires: now.Add(time.Minute)}))
	must(r.AddFence(ctx, "n10", "v1:c:p:a", Fence{Addrs: []string{"10.0.0.9:0/1"}, Expires: now.Add(time.Hour)}))
	if v := store[Object+"/fenced/n1/v1:c:p:a"]; v != "1003600 10.0.0.1:0/1 10.0.0.1:0/2" {
		t.Fatalf("record %q", v)
	}
	got, err := r.Fences(ctx, "n1")
	want := map[string]Fence{"v1:c:p:a": {Addrs: []string{"10.0.0.1:0/1", "10.0.0.1:0/2"}, Expires: now.Add(time.Hour)}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Fences(n1) = %v, %v; want %v", got, err, want)
	}
	if ids, _ := r.Attachments(ctx, "n1"); len(ids) != 0 {
		t.Fatalf("fences read as attachments: %v", ids)
	}
}

// The lift removes the node's own entries and record; an address another
// fenced volume of the node still holds (a krbd client shared between
// mappings) stays blocklisted until that volume is lifted.
func TestLiftSparesSharedClients(t *testing.T) {
	r, store, now := fencedRegistry(t)
	ctx := context.Background()
	shared, own := "10.0.0.1:0/7", "10.0.0.1:0/8"
	bl := &blocklist{entries: map[string]bool{shared: true, own: true}}
	u := NewUnfencer(r, bl, "n1")
	_ = r.AddFence(ctx, "n1", "v1:c:p:a", Fence{Addrs: []string{shared, own}, Expires: now.Add(time.Hour)})
	_ = r.AddFence(ctx, "n1", "v1:c:p:b", Fence{Addrs: []string{shared}, Expires: now.Add(time.Hour)})

	for vol, want := range map[string]bool{"v1:c:p:a": true, "v1:c:p:none": false} {
		if got, err := u.Fenced(ctx, vol); err != nil || got != want {
			t.Errorf("Fenced(%s) = %v, %v; want %v", vol, got, err, want)
		}
	}
	if lifted, fenced, err := u.Lift(ctx, "v1:c:p:none", "mon"); err != nil || fenced || lifted != nil {
		t.Fatalf("Lift of an unfenced volume: %v, %v, %v", lifted, fenced, err)
	}
	lifted, fenced, err := u.Lift(ctx, "v1:c:p:a", "mon")
	if err != nil || !fenced || !slices.Equal(lifted, []string{own}) || !bl.entries[shared] || bl.entries[own] {
		t.Fatalf("Lift(a) = %v, %v, %v; blocklist %v", lifted, fenced, err, bl.entries)
	}
	if _, ok := store[Object+"/fenced/n1/v1:c:p:a"]; ok {
		t.Fatal("the record stays after the lift")
	}
	if lifted, _, err := u.Lift(ctx, "v1:c:p:b", "mon"); err != nil || !slices.Equal(lifted, []string{shared}) || len(bl.entries) != 0 {
		t.Fatalf("Lift(b) = %v, %v; blocklist %v", lifted, err, bl.entries)
	}
}

// A lift that Ceph refuses keeps the record (its entries stay until they
// expire) and says which right the node user lacks.
func TestLiftFailureKeepsTheRecord(t *testing.T) {
	r, store, now := fencedRegistry(t)
	ctx := context.Background()
	bl := &blocklist{entries: map[string]bool{"10.0.0.1:0/7": true}, err: rbd.ErrPermission}
	_ = r.AddFence(ctx, "n1", "v1:c:p:a", Fence{Addrs: []string{"10.0.0.1:0/7"}, Expires: now.Add(time.Hour)})
	_, _, err := NewUnfencer(r, bl, "n1").Lift(ctx, "v1:c:p:a", "mon")
	if !errors.Is(err, rbd.ErrPermission) || !strings.Contains(err.Error(), `blocklistop=rm`) || !strings.Contains(err.Error(), "rbdcsi-node") {
		t.Fatalf("Lift refused: %v", err)
	}
	if _, ok := store[Object+"/fenced/n1/v1:c:p:a"]; !ok {
		t.Fatal("a refused lift dropped the record")
	}
}

// Records whose entries Ceph has dropped by itself go; an expired record
// is lifted without asking Ceph.
func TestExpiredFences(t *testing.T) {
	r, store, now := fencedRegistry(t)
	ctx := context.Background()
	_ = r.AddFence(ctx, "n1", "v1:c:p:old", Fence{Addrs: []string{"10.0.0.1:0/1"}, Expires: now.Add(time.Minute)})
	_ = r.AddFence(ctx, "n2", "v1:c:p:new", Fence{Addrs: []string{"10.0.0.2:0/1"}, Expires: now.Add(time.Hour)})
	store[Object+"/fenced/n3/v1:c:p:bad"] = "garbage"
	*now = now.Add(2 * time.Minute)
	if n, err := r.DropExpiredFences(ctx); err != nil || n != 2 {
		t.Fatalf("DropExpiredFences = %d, %v; want the expired and the malformed record", n, err)
	}
	if f, _ := r.Fences(ctx, "n2"); len(f) != 1 {
		t.Fatalf("a live fence went: %v", f)
	}
	_ = r.AddFence(ctx, "n1", "v1:c:p:old", Fence{Addrs: []string{"10.0.0.1:0/1"}, Expires: now.Add(-time.Second)})
	bl := &blocklist{err: errors.New("Ceph must not be asked")}
	if fenced, err := NewUnfencer(r, bl, "n1").Fenced(ctx, "v1:c:p:old"); err != nil || fenced {
		t.Fatalf("Fenced of an expired fence: %v, %v; want false", fenced, err)
	}
	if lifted, fenced, err := NewUnfencer(r, bl, "n1").Lift(ctx, "v1:c:p:old", "mon"); err != nil || !fenced || len(lifted) != 0 {
		t.Fatalf("Lift of an expired fence: %v, %v, %v", lifted, fenced, err)
	}
	if f, _ := r.Fences(ctx, "n1"); len(f) != 0 {
		t.Fatalf("the expired record stays after its lift: %v", f)
	}
}
