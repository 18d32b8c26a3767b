package metrics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rbdcsi/rbdcsi/internal/controller/upkeep"
	"github.com/rbdcsi/rbdcsi/internal/metrics"
)

// The KEK rotation's progress: re-wraps by KMS and result, passes, and a
// pending gauge per KMS that follows the last pass (a KMS no longer
// reported goes; a pass that could not start keeps the last counts).
func TestRotationMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var up upkeep.Observer = m
	up.Rewrapped("tenant-a", nil)
	up.Rewrapped("tenant-a", nil)
	up.Rewrapped("tenant-a", errors.New("no KEK old"))
	up.RotationPassed(map[string]int{"tenant-a": 1, "unknown": 2}, errors.New("1 data key could not be re-wrapped"))
	up.RotationPassed(map[string]int{"tenant-a": 0}, nil)
	up.RotationPassed(nil, errors.New("the controller's secrets: missing"))
	want := `
# HELP rbdcsi_kek_rewraps_total Data keys of encrypted volumes the KEK rotation re-wrapped to their KMS's current KEK, by KMS ID (unknown: a malformed record, or a KMS the configuration lacks) and result (success, or error: the volume keeps its old wrapping).
# TYPE rbdcsi_kek_rewraps_total counter
rbdcsi_kek_rewraps_total{kms="tenant-a",result="error"} 1
rbdcsi_kek_rewraps_total{kms="tenant-a",result="success"} 2
# HELP rbdcsi_kek_rotation_passes_total Passes of the KEK rotation over every pool, by result (success, or error: part of it failed; the log says why).
# TYPE rbdcsi_kek_rotation_passes_total counter
rbdcsi_kek_rotation_passes_total{result="error"} 2
rbdcsi_kek_rotation_passes_total{result="success"} 1
# HELP rbdcsi_kek_rotation_pending_volumes After the last KEK rotation pass, by KMS ID: encrypted volumes whose data key is still wrapped by another KEK than the current one, or could not be checked. 0: the KMS's old KEKs may be removed.
# TYPE rbdcsi_kek_rotation_pending_volumes gauge
rbdcsi_kek_rotation_pending_volumes{kms="tenant-a"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rbdcsi_kek_rewraps_total", "rbdcsi_kek_rotation_passes_total", "rbdcsi_kek_rotation_pending_volumes"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
