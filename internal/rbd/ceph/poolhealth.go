package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// PoolHealth reads the pool's flags in the OSD map and the cluster's
// health report (two mon commands): Ceph marks a pool full when its quota
// is reached or an OSD it maps to is full, nearfull past the OSDs'
// nearfull ratio, and reports placement groups stuck inactive (after
// mon_pg_stuck_threshold, a minute by default). Writes to a full pool
// wait instead of failing, so callers ask this when a write timed out.
func (b *Backend) PoolHealth(ctx context.Context, p rbd.Pool) (rbd.PoolHealth, error) {
	var h rbd.PoolHealth
	err := b.withConn(ctx, p.MonHost, p.Cred, "PoolHealth", func(conn *rados.Conn) error {
		out, status, err := conn.MonCommand([]byte(`{"prefix":"osd dump","format":"json"}`))
		if err != nil {
			return fmt.Errorf("osd dump: %s: %w", status, classify(err))
		}
		var dump struct {
			Pools []struct {
				ID    int64  `json:"pool"`
				Name  string `json:"pool_name"`
				Flags string `json:"flags_names"`
			} `json:"pools"`
		}
		if err := json.Unmarshal(out, &dump); err != nil {
			return fmt.Errorf("parsing osd dump: %w", err)
		}
		id := int64(-1)
		for _, pl := range dump.Pools {
			if pl.Name == p.Name {
				id = pl.ID
				for _, f := range strings.Split(pl.Flags, ",") {
					h.Full = h.Full || f == "full" || f == "full_quota"
					h.Quota = h.Quota || f == "full_quota"
					h.NearFull = h.NearFull || f == "nearfull"
				}
			}
		}
		if id < 0 {
			return nil
		}
		out, status, err = conn.MonCommand([]byte(`{"prefix":"health","detail":"detail","format":"json"}`))
		if err != nil {
			return fmt.Errorf("health detail: %s: %w", status, classify(err))
		}
		h.InactivePGs, h.InactiveState = inactivePGs(out, id)
		return nil
	})
	return h, rbd.RefusedAt(p.Cred, cluster.CapMon, err)
}

// stuckInactive is how the health report names a placement group stuck
// inactive: "pg 3.1f is stuck inactive for 63s, current state
// undersized+peered, last acting [1,2,0]".
var stuckInactive = regexp.MustCompile(`^pg (\d+)\.[0-9a-f]+ is stuck inactive for [^,]*, current state ([^,\s]+)`)

// inactivePGs counts the pool's placement groups the health report lists
// as stuck inactive (the report lists at most mon_health_max_detail of
// them) and the state of the first.
func inactivePGs(health []byte, poolID int64) (n int, state string) {
	var report struct {
		Checks map[string]struct {
			Detail []struct {
				Message string `json:"message"`
			} `json:"detail"`
		} `json:"checks"`
	}
	if json.Unmarshal(health, &report) != nil {
		return 0, ""
	}
	want := strconv.FormatInt(poolID, 10)
	for _, d := range report.Checks["PG_AVAILABILITY"].Detail {
		if m := stuckInactive.FindStringSubmatch(d.Message); m != nil && m[1] == want {
			if n == 0 {
				state = m[2]
			}
			n++
		}
	}
	return n, state
}
