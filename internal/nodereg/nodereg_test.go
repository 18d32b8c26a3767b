package nodereg

import (
	"context"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// memStore is an in-memory omap for the registry's pure logic.
type memStore map[string]string

func (m memStore) SetOmap(_ context.Context, _ rbd.Pool, _ string, kv map[string]string) error {
	for k, v := range kv {
		m[k] = v
	}
	return nil
}

func (m memStore) GetOmap(_ context.Context, _ rbd.Pool, _ string, key string) (string, bool, error) {
	v, ok := m[key]
	return v, ok, nil
}

func (m memStore) RemoveOmapKeys(_ context.Context, _ rbd.Pool, _ string, keys ...string) error {
	for _, k := range keys {
		delete(m, k)
	}
	return nil
}

func TestKnownHonoursTTL(t *testing.T) {
	store := memStore{}
	r := New(store, rbd.Pool{}, time.Minute)
	now := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	if err := r.Beat(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node  string
		after time.Duration
		want  bool
	}{
		{"node-a", 0, true},
		{"node-a", 59 * time.Second, true},
		{"node-a", 61 * time.Second, false},
		{"node-b", 0, false},
		{"../x", 0, false},
		{"", 0, false},
	} {
		now = time.Unix(1_000_000, 0).Add(tc.after)
		got, err := r.Known(ctx, tc.node)
		if err != nil || got != tc.want {
			t.Errorf("Known(%q) after %v = %v, %v; want %v", tc.node, tc.after, got, err, tc.want)
		}
	}
	store["node-c"] = "garbage"
	if ok, _ := r.Known(ctx, "node-c"); ok {
		t.Error("an unparsable heartbeat counts")
	}
}

func TestRunDeregistersOnStop(t *testing.T) {
	store := memStore{}
	r := New(store, rbd.Pool{}, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, "node-a", 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ok, _ := r.Known(context.Background(), "node-a"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if _, ok := store["node-a"]; ok {
		t.Fatal("the node stays registered after a clean stop")
	}
}

func TestParseLocation(t *testing.T) {
	if c, p, err := ParseLocation("c1/rbd"); err != nil || c != "c1" || p != "rbd" {
		t.Fatalf("got %q %q %v", c, p, err)
	}
	for _, bad := range []string{"", "c1", "/rbd", "c1/", "c1/a/b", "../x/rbd"} {
		if _, _, err := ParseLocation(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
