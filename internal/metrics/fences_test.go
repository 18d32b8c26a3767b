package metrics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rbdcsi/rbdcsi/internal/metrics"
)

// Fences the controller made and the node lifted are counted by result.
func TestFences(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Fenced(nil)
	m.Fenced(nil)
	m.Fenced(errors.New("monitor unreachable"))
	m.FenceLifted(nil)
	m.Reclaimed("expired-fence")
	want := `
# HELP rbdcsi_fence_lifts_total Node: fences of this node lifted once it unstaged the volume, by result (success, or error: the entries stay until they expire).
# TYPE rbdcsi_fence_lifts_total counter
rbdcsi_fence_lifts_total{result="success"} 1
# HELP rbdcsi_fences_total Controller: nodes fenced (their clients blocklisted) because they still had a single-node volume open when it was detached from them, by result (success, or error: the volume stayed attached and the detach is retried).
# TYPE rbdcsi_fences_total counter
rbdcsi_fences_total{result="error"} 1
rbdcsi_fences_total{result="success"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rbdcsi_fences_total", "rbdcsi_fence_lifts_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "rbdcsi_reclaimed_total"); err != nil || n != 1 {
		t.Errorf("reclaimed series = %d, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
