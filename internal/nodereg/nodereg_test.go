package nodereg

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// memStore is an in-memory omap for the registry's pure logic, keyed by
// object + "/" + key.
type memStore map[string]string

func (m memStore) SetOmap(_ context.Context, _ rbd.Pool, obj string, kv map[string]string) error {
	for k, v := range kv {
		m[obj+"/"+k] = v
	}
	return nil
}

func (m memStore) GetOmap(_ context.Context, _ rbd.Pool, obj, key string) (string, bool, error) {
	v, ok := m[obj+"/"+key]
	return v, ok, nil
}

func (m memStore) RemoveOmapKeys(_ context.Context, _ rbd.Pool, obj string, keys ...string) error {
	for _, k := range keys {
		delete(m, obj+"/"+k)
	}
	return nil
}

func (m memStore) ListOmap(_ context.Context, _ rbd.Pool, obj, prefix string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, obj+"/"+prefix); ok {
			out[prefix+rest] = v
		}
	}
	return out, nil
}

// Two Kubernetes clusters sharing the pool (instances) never see each
// other's nodes or attachments.
func TestInstancesKeepApart(t *testing.T) {
	store := memStore{}
	ctx := context.Background()
	def, b := New(store, rbd.Pool{}, "", time.Minute), New(store, rbd.Pool{}, "b", time.Minute)
	if err := b.Beat(ctx, Node{ID: "node-b"}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddAttachment(ctx, "node-b", "v1:c:p:i"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := def.Lookup(ctx, "node-b"); ok {
		t.Error("the default instance sees instance b's node")
	}
	if ids, _ := def.Attachments(ctx, "node-b"); len(ids) != 0 {
		t.Errorf("the default instance sees instance b's attachments %v", ids)
	}
	if _, ok, _ := b.Lookup(ctx, "node-b"); !ok {
		t.Error("instance b does not see its node")
	}
	if _, ok := store["rbdcsi.nodes.b/node-b"]; !ok {
		t.Errorf("instance b's heartbeat is not in rbdcsi.nodes.b: %v", store)
	}
}

func TestLookupHonoursTTL(t *testing.T) {
	store := memStore{}
	r := New(store, rbd.Pool{}, "", time.Minute)
	now := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	if err := r.Beat(ctx, Node{ID: "node-a"}); err != nil {
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
		_, got, err := r.Lookup(ctx, tc.node)
		if err != nil || got != tc.want {
			t.Errorf("Lookup(%q) after %v = %v, %v; want %v", tc.node, tc.after, got, err, tc.want)
		}
	}
	store[Object+"/node-c"] = "garbage"
	if _, ok, _ := r.Lookup(ctx, "node-c"); ok {
		t.Error("an unparsable heartbeat counts")
	}
}

// lockedStore is a memStore that beats from another goroutine may share.
type lockedStore struct {
	mu sync.Mutex
	m  memStore
}

func (l *lockedStore) SetOmap(ctx context.Context, p rbd.Pool, obj string, kv map[string]string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.SetOmap(ctx, p, obj, kv)
}

func (l *lockedStore) GetOmap(ctx context.Context, p rbd.Pool, obj, key string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.GetOmap(ctx, p, obj, key)
}

func (l *lockedStore) RemoveOmapKeys(ctx context.Context, p rbd.Pool, obj string, keys ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.RemoveOmapKeys(ctx, p, obj, keys...)
}

func (l *lockedStore) ListOmap(ctx context.Context, p rbd.Pool, obj, prefix string) (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.ListOmap(ctx, p, obj, prefix)
}

func TestRunDeregistersOnStop(t *testing.T) {
	store := &lockedStore{m: memStore{}}
	r := New(store, rbd.Pool{}, "", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, Node{ID: "node-a"}, 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok, _ := r.Lookup(context.Background(), "node-a"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if _, ok := store.m[Object+"/node-a"]; ok {
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

func TestHeartbeatCarriesTheVolumeLimit(t *testing.T) {
	store := memStore{}
	r := New(store, rbd.Pool{}, "", time.Minute)
	ctx := context.Background()
	for _, want := range []Node{{ID: "limited", MaxVolumes: 16}, {ID: "unlimited"}} {
		if err := r.Beat(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, ok, err := r.Lookup(ctx, want.ID)
		if err != nil || !ok || got != want {
			t.Errorf("Lookup(%s) = %+v, %v, %v; want %+v", want.ID, got, ok, err, want)
		}
	}
	store[Object+"/broken"] = strconv.FormatInt(time.Now().Unix(), 10) + " many"
	if _, _, err := r.Lookup(ctx, "broken"); err == nil {
		t.Error("a malformed limit is not reported")
	}
}

func TestAttachmentIndexIsPerNode(t *testing.T) {
	store := memStore{}
	r := New(store, rbd.Pool{}, "", time.Minute)
	ctx := context.Background()
	for _, a := range [][2]string{{"n1", "v1:c:p:a"}, {"n1", "v1:c:p:b"}, {"n10", "v1:c:p:c"}, {"n1", "v1:c:p:a"}} {
		if err := r.AddAttachment(ctx, a[0], a[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Beat(ctx, Node{ID: "n1", MaxVolumes: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Attachments(ctx, "n1")
	if want := []string{"v1:c:p:a", "v1:c:p:b"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Attachments(n1) = %v, %v; want %v (n10's and the heartbeat are not n1's)", got, err, want)
	}
	if err := r.RemoveAttachment(ctx, "n1", "v1:c:p:a"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveAttachment(ctx, "n1", "v1:c:p:a"); err != nil {
		t.Fatal("removing an absent entry:", err)
	}
	if got, _ := r.Attachments(ctx, "n1"); !reflect.DeepEqual(got, []string{"v1:c:p:b"}) {
		t.Fatalf("after removal: %v", got)
	}
}
