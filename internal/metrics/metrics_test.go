package metrics_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/driver"
	"github.com/rbdcsi/rbdcsi/internal/metrics"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// TestScrapeAfterCalls runs the real CSI server with the metrics
// interceptor on a unix socket, makes Identity calls (one failing), and
// scrapes /metrics over HTTP.
func TestScrapeAfterCalls(t *testing.T) {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The CSI server, with a health check that fails so Probe returns
	// FailedPrecondition.
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, cleanup, err := driver.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	unhealthy := func(context.Context) error { return errors.New("cluster map unreadable") }
	srv := driver.NewServer(driver.Services{
		Identity: driver.NewIdentity("rbd.csi.rbdcsi.dev", "test", driver.Capabilities{Controller: true}, unhealthy),
	}, m.UnaryInterceptor())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l, time.Second) }()

	// The metrics server.
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsDone := make(chan error, 1)
	go func() { metricsDone <- metrics.Serve(ctx, ml, reg) }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := csi.NewIdentityClient(conn)
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	for range 3 {
		if _, err := id.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{}); err != nil {
			t.Fatalf("GetPluginInfo: %v", err)
		}
	}
	if _, err := id.GetPluginCapabilities(callCtx, &csi.GetPluginCapabilitiesRequest{}); err != nil {
		t.Fatalf("GetPluginCapabilities: %v", err)
	}
	if _, err := id.Probe(callCtx, &csi.ProbeRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Probe: got %v, want FailedPrecondition", err)
	}

	body := scrape(t, "http://"+ml.Addr().String()+"/metrics")
	for _, want := range []string{
		`rbdcsi_csi_requests_total{code="OK",method="GetPluginInfo"} 3`,
		`rbdcsi_csi_requests_total{code="OK",method="GetPluginCapabilities"} 1`,
		`rbdcsi_csi_requests_total{code="FailedPrecondition",method="Probe"} 1`,
		`rbdcsi_csi_request_duration_seconds_count{code="OK",method="GetPluginInfo"} 3`,
		`rbdcsi_csi_request_duration_seconds_count{code="FailedPrecondition",method="Probe"} 1`,
		`rbdcsi_csi_requests_in_flight{method="Probe"} 0`,
		`# TYPE rbdcsi_csi_request_duration_seconds histogram`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `code="OK",method="Probe"`) {
		t.Errorf("/metrics counts a failed Probe as OK")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("CSI server: %v", err)
	}
	if err := <-metricsDone; err != nil {
		t.Errorf("metrics server: %v", err)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// TestInFlight sees the gauge at 1 while a call runs and back at 0 after.
func TestInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	icpt := m.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/CreateVolume"}
	var during float64
	_, err = icpt(context.Background(), nil, info, func(context.Context, any) (any, error) {
		during = gaugeValue(t, reg, "rbdcsi_csi_requests_in_flight")
		return nil, status.Error(codes.Aborted, "operation pending")
	})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("interceptor changed the error: %v", err)
	}
	if during != 1 {
		t.Errorf("in-flight during the call = %v, want 1", during)
	}
	if after := gaugeValue(t, reg, "rbdcsi_csi_requests_in_flight"); after != 0 {
		t.Errorf("in-flight after the call = %v, want 0", after)
	}
	want := `
# HELP rbdcsi_csi_requests_total CSI calls handled, by gRPC method and status code.
# TYPE rbdcsi_csi_requests_total counter
rbdcsi_csi_requests_total{code="Aborted",method="CreateVolume"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rbdcsi_csi_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestCephObserver records success and error results separately.
func TestCephObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var obs rbd.Observer = m
	obs.ObserveCephOp("image.create", 20*time.Millisecond, nil)
	obs.ObserveCephOp("image.create", 30*time.Millisecond, errors.New("pool full"))
	obs.ObserveCephOp("image.remove", time.Millisecond, nil)

	n, err := testutil.GatherAndCount(reg, "rbdcsi_ceph_operation_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("ceph op series = %d, want 3", n)
	}
	rec := httptest.NewRecorder()
	metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`rbdcsi_ceph_operation_duration_seconds_count{operation="image.create",result="success"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="image.create",result="error"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="image.remove",result="success"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, rec.Body.String())
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			sum += mm.GetGauge().GetValue()
		}
	}
	return sum
}

// Registering twice on one registry fails instead of panicking, so two
// servers in one process cannot silently share series.
func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("second New on the same registry succeeded")
	}
	if _, err := metrics.New(prometheus.NewRegistry()); err != nil {
		t.Fatalf("New on a fresh registry: %v", err)
	}
}
