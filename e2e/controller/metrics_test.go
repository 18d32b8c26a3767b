package controller

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The metrics endpoint counts CSI calls by code and times Ceph operations.
func TestMetrics(t *testing.T) {
	c := harness.LoadCluster(t)
	addr := freeAddr(t)
	p := harness.StartPlugin(t, c, "--mode", "controller", "--metrics-address", addr)
	e := env{c: c, p: p, cc: p.Controller()}
	t.Cleanup(func() { c.ExpectNoImages(t) })
	v := e.mustCreate(t, "metrics", mib)
	_, _ = e.create(t, "", mib) // InvalidArgument
	e.delete(t, v.VolumeId)
	expectMetrics(t, addr,
		`rbdcsi_csi_requests_total{code="OK",method="CreateVolume"} 1`,
		`rbdcsi_csi_requests_total{code="InvalidArgument",method="CreateVolume"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="CreateImage",result="success"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="RemoveImage",result="success"} 1`,
	)
}

// freeAddr is a loopback address nothing listens on, for --metrics-address.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	harness.Must(t, err, "free port")
	defer l.Close()
	return l.Addr().String()
}

// expectMetrics scrapes the plugin's /metrics until it holds every line
// (background work is counted just after its effect shows in the pool),
// for 30 seconds at most.
func expectMetrics(t *testing.T, addr string, lines ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := missingMetrics(t, addr, lines)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %v", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func missingMetrics(t *testing.T, addr string, lines []string) []string {
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	harness.Must(t, err, "scrape")
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	harness.Must(t, err, "reading /metrics")
	var missing []string
	for _, want := range lines {
		if !strings.Contains(string(body), want) {
			missing = append(missing, want)
		}
	}
	return missing
}
