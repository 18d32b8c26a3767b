package controller

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The metrics endpoint counts CSI calls by code and times Ceph operations.
func TestMetrics(t *testing.T) {
	c := harness.LoadCluster(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	harness.Must(t, err, "free port")
	addr := l.Addr().String()
	l.Close()
	p := harness.StartPlugin(t, c, "--mode", "controller", "--metrics-address", addr)
	e := env{c: c, p: p, cc: p.Controller()}
	t.Cleanup(func() { c.ExpectNoImages(t) })
	v := e.mustCreate(t, "metrics", mib)
	_, _ = e.create(t, "", mib) // InvalidArgument
	e.delete(t, v.VolumeId)

	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	harness.Must(t, err, "scrape")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`rbdcsi_csi_requests_total{code="OK",method="CreateVolume"} 1`,
		`rbdcsi_csi_requests_total{code="InvalidArgument",method="CreateVolume"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="CreateImage",result="success"} 1`,
		`rbdcsi_ceph_operation_duration_seconds_count{operation="RemoveImage",result="success"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
