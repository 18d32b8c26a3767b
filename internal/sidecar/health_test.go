package sidecar

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rbdcsi/rbdcsi/internal/driver"
)

// stubIdentity answers Probe as told.
type stubIdentity struct {
	csi.UnimplementedIdentityServer
	mode  atomic.Int32 // 0 ready, 1 error, 2 ready=false, 3 hang, 4 ready unset
	calls atomic.Int32
}

func (s *stubIdentity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	s.calls.Add(1)
	switch s.mode.Load() {
	case 1:
		return nil, status.Error(codes.FailedPrecondition, "not ready: cluster map does not load")
	case 2:
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	case 3:
		<-ctx.Done()
		return nil, ctx.Err()
	case 4:
		return &csi.ProbeResponse{}, nil
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// serveIdentity serves an Identity service on a unix socket; it returns
// the CSI endpoint.
func serveIdentity(t *testing.T, id csi.IdentityServer) string {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, id)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestHealthzProbesThePlugin(t *testing.T) {
	id := &stubIdentity{}
	endpoint := serveIdentity(t, id)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := ServeHealth(ctx, l, endpoint, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/healthz"

	for _, tc := range []struct {
		name string
		mode int32
		code int
		body string
	}{
		{"ready", 0, 200, "ok"},
		{"ready unset", 4, 200, "ok"},
		{"probe error", 1, 500, "cluster map does not load"},
		{"not ready", 2, 500, "not ready"},
		{"probe hangs", 3, 500, "DeadlineExceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id.mode.Store(tc.mode)
			before := id.calls.Load()
			code, body := get(t, url)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("GET /healthz = %d %q, want %d containing %q", code, body, tc.code, tc.body)
			}
			if id.calls.Load() != before+1 {
				t.Errorf("Probe calls: %d, want one per request", id.calls.Load()-before)
			}
		})
	}
	if code, _ := get(t, "http://"+l.Addr().String()+"/other"); code != http.StatusNotFound {
		t.Errorf("GET /other = %d, want 404", code)
	}

	cancel()
	wait()
	if _, err := http.Get(url); err == nil {
		t.Error("health server still answers after stop")
	}
}

// TestHealthzPluginDown: a plugin socket that does not answer is unhealthy.
func TestHealthzPluginDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait, err := ServeHealth(ctx, l, "unix://"+filepath.Join(shortTempDir(t), "none.sock"), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	if code, body := get(t, "http://"+l.Addr().String()+"/healthz"); code != 500 {
		t.Errorf("GET /healthz with no plugin = %d %q, want 500", code, body)
	}
}

// TestHealthzWithRealIdentity runs the plugin's own Identity service: its
// health checks decide the answer.
func TestHealthzWithRealIdentity(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	check := func(context.Context) error {
		if healthy.Load() {
			return nil
		}
		return io.ErrUnexpectedEOF
	}
	endpoint := serveIdentity(t, driver.NewIdentity("rbd.csi.rbdcsi.dev", "test", driver.Capabilities{}, check))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait, err := ServeHealth(ctx, l, endpoint, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	url := "http://" + l.Addr().String() + "/healthz"
	if code, body := get(t, url); code != 200 {
		t.Errorf("healthy: %d %q", code, body)
	}
	healthy.Store(false)
	if code, body := get(t, url); code != 500 || !strings.Contains(body, "unexpected EOF") {
		t.Errorf("unhealthy: %d %q", code, body)
	}
}

func TestGRPCTarget(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///csi/csi.sock":  "unix:///csi/csi.sock",
		"tcp://127.0.0.1:10000": "passthrough:///127.0.0.1:10000",
		"tcp://:10000":          "passthrough:///localhost:10000",
		"tcp://0.0.0.0:10000":   "passthrough:///localhost:10000",
		"tcp://[::1]:10000":     "passthrough:///[::1]:10000",
	} {
		got, err := grpcTarget(in)
		if err != nil || got != want {
			t.Errorf("grpcTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/csi.sock", "http://x:1", "tcp://nohost", "unix://"} {
		if got, err := grpcTarget(bad); err == nil {
			t.Errorf("grpcTarget(%q) = %q, want an error", bad, got)
		}
	}
}
