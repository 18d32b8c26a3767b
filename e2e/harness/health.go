package harness

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// WaitHealth polls `ceph health` until match says yes (bounded: three
// minutes, for a loaded machine whose monitor and manager lag).
func (c Cluster) WaitHealth(t testing.TB, what string, match func(health string) bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, err := c.Ceph("health")
		if err == nil && match(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never got %s: %s %v", what, out, err)
		}
	}
}

// WaitPoolActive waits until every placement group of pool is active
// (bounded), as a test that made them inactive must before the next test
// starts. `ceph health` names inactive groups only once they are stuck
// (mon_pg_stuck_threshold), so a healthy-looking cluster may still not
// serve the pool.
func (c Cluster) WaitPoolActive(t testing.TB, pool string) {
	t.Helper()
	var states []string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, err := c.Ceph("pg", "ls-by-pool", pool, "--format", "json")
		states = states[:0]
		if err == nil {
			var pgs struct {
				Stats []struct {
					PGID  string `json:"pgid"`
					State string `json:"state"`
				} `json:"pg_stats"`
			}
			if err = json.Unmarshal([]byte(out), &pgs); err == nil {
				for _, pg := range pgs.Stats {
					if !slices.Contains(strings.Split(pg.State, "+"), "active") {
						states = append(states, pg.PGID+" "+pg.State)
					}
				}
				if len(pgs.Stats) > 0 && len(states) == 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("placement groups of pool %s still not active after 3 minutes (the tests after this one would hang on them): %v %v", pool, states, err)
		}
	}
}

// CephRepair runs a ceph command that undoes a test's damage to the
// cluster, trying again when it fails (a monitor slow to answer on a
// loaded machine): left undone, the damage would fail every test after
// this one.
func (c Cluster) CephRepair(t testing.TB, args ...string) {
	t.Helper()
	var out string
	var err error
	for try := 0; try < 5; try++ {
		if out, err = c.Ceph(args...); err == nil {
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Errorf("repairing the cluster: %v: %s", err, out)
}
