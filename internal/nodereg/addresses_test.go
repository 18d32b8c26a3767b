package nodereg

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// A node's client address goes in and comes back per node and cluster; a
// newer one replaces the older; none recorded is not an error.
func TestClientIPRoundTrip(t *testing.T) {
	r, store, _ := fencedRegistry(t)
	ctx := context.Background()
	if _, ok, err := r.ClientIP(ctx, "n1", "site-a"); ok || err != nil {
		t.Fatalf("ClientIP before any record = %v, %v; want not found", ok, err)
	}
	for _, rec := range []struct{ node, cluster, ip string }{
		{"n1", "site-a", "10.0.0.1"}, {"n1", "site-b", "10.1.0.1"}, {"n10", "site-a", "fd00::10"}, {"n1", "site-a", "10.0.0.9"},
	} {
		if err := r.SetClientIP(ctx, rec.node, rec.cluster, netip.MustParseAddr(rec.ip)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct{ node, cluster, ip string }{
		{"n1", "site-a", "10.0.0.9"}, {"n1", "site-b", "10.1.0.1"}, {"n10", "site-a", "fd00::10"},
	} {
		ip, ok, err := r.ClientIP(ctx, want.node, want.cluster)
		if err != nil || !ok || ip != netip.MustParseAddr(want.ip) {
			t.Errorf("ClientIP(%s, %s) = %v, %v, %v; want %s", want.node, want.cluster, ip, ok, err, want.ip)
		}
	}
	if v := store[Object+"/addr/n1/site-a"]; v != "10.0.0.9" {
		t.Errorf("the record is %q, want the plain IP under addr/<node>/<clusterID>", v)
	}
	// An IPv4 address seen through an IPv6 socket is the IPv4 one.
	if err := r.SetClientIP(ctx, "n2", "site-a", netip.MustParseAddr("::ffff:10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if ip, _, _ := r.ClientIP(ctx, "n2", "site-a"); ip != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("a 4-in-6 address reads back as %v", ip)
	}
	store[Object+"/addr/n3/site-a"] = "not an address"
	if _, ok, err := r.ClientIP(ctx, "n3", "site-a"); ok || err == nil {
		t.Errorf("a malformed record reads as %v, %v; want an error", ok, err)
	}
}

// IDs that would name another key are refused both ways, and so is an
// empty address.
func TestClientIPRefusesOtherKeys(t *testing.T) {
	r, store, _ := fencedRegistry(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	for _, ids := range [][2]string{{"n1/x", "site-a"}, {"", "site-a"}, {"n1", "site/a"}, {"n1", ""}} {
		if err := r.SetClientIP(ctx, ids[0], ids[1], ip); err == nil {
			t.Errorf("SetClientIP(%q, %q) was taken", ids[0], ids[1])
		}
		if _, _, err := r.ClientIP(ctx, ids[0], ids[1]); err == nil {
			t.Errorf("ClientIP(%q, %q) was taken", ids[0], ids[1])
		}
	}
	if err := r.SetClientIP(ctx, "n1", "site-a", netip.Addr{}); err == nil {
		t.Error("an empty address was recorded")
	}
	if len(store) != 0 {
		t.Errorf("refused calls wrote %v", store)
	}
}

// Every other reader of the registry lists or reads keys of its own, so
// the address keys are invisible to them, as to a controller that
// predates them: the heartbeats (keys without "/"), the attachment index,
// the fence records and their sweep. A node named like the prefix keeps
// its heartbeat apart.
func TestClientIPKeysStayOutOfOtherReaders(t *testing.T) {
	r, store, now := fencedRegistry(t)
	ctx := context.Background()
	for _, n := range []string{"n1", "addr"} {
		if err := r.Beat(ctx, Node{ID: n, MaxVolumes: 3}); err != nil {
			t.Fatal(err)
		}
		if err := r.SetClientIP(ctx, n, "site-a", netip.MustParseAddr("10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetClientIP(ctx, "n1", "n1", netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "addr"} {
		if got, ok, err := r.Lookup(ctx, n); err != nil || !ok || got.MaxVolumes != 3 {
			t.Errorf("Lookup(%s) = %+v, %v, %v: the address keys disturb the heartbeat", n, got, ok, err)
		}
		if ids, err := r.Attachments(ctx, n); err != nil || len(ids) != 0 {
			t.Errorf("Attachments(%s) = %v, %v", n, ids, err)
		}
		if f, err := r.Fences(ctx, n); err != nil || len(f) != 0 {
			t.Errorf("Fences(%s) = %v, %v", n, f, err)
		}
	}
	if f, err := r.VolumeFences(ctx); err != nil || len(f) != 0 {
		t.Errorf("VolumeFences = %v, %v", f, err)
	}
	*now = now.Add(24 * time.Hour)
	if n, err := r.DropExpiredFences(ctx); err != nil || n != 0 {
		t.Errorf("DropExpiredFences = %d, %v; want nothing to drop", n, err)
	}
	if _, ok := store[Object+"/addr/n1/site-a"]; !ok {
		t.Error("the sweep of fence records removed an address key")
	}
}
