package ceph

import "testing"

// The health report's stuck-inactive lines are counted for their pool
// alone; other checks and other pools' lines are not.
func TestInactivePGs(t *testing.T) {
	report := []byte(`{"status":"HEALTH_WARN","checks":{
		"PG_AVAILABILITY":{"detail":[
			{"message":"pg 3.0 is stuck inactive for 63s, current state undersized+peered, last acting [1,2,0]"},
			{"message":"pg 3.1f is stuck inactive for 2m, current state unknown, last acting []"},
			{"message":"pg 13.2 is stuck inactive for 63s, current state peering, last acting [0]"}]},
		"PG_DEGRADED":{"detail":[{"message":"pg 3.4 is stuck undersized for 63s, current state undersized+peered"}]}}}`)
	if n, state := inactivePGs(report, 3); n != 2 || state != "undersized+peered" {
		t.Errorf("pool 3: %d %q, want 2 undersized+peered", n, state)
	}
	if n, _ := inactivePGs(report, 13); n != 1 {
		t.Errorf("pool 13: %d, want 1", n)
	}
	if n, _ := inactivePGs(report, 1); n != 0 {
		t.Errorf("pool 1: %d, want 0", n)
	}
	if n, _ := inactivePGs([]byte(`{"status":"HEALTH_OK","checks":{}}`), 3); n != 0 {
		t.Errorf("a healthy cluster: %d", n)
	}
}
