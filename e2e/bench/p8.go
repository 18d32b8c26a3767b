package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// runP8 measures the controller in a pool of -fill images against the
// same in an empty pool: CreateVolume and DeleteVolume rates, complete
// paginated listings at a tenth of the fill and at the fill, one sweep of
// the pool (cold, after a restart, then idle) and the controller's RSS.
func (b *bench) runP8(ctx context.Context) error {
	fill, small := b.cfg.fill, max(b.cfg.fill/10, 1)
	b.logf("P8: a pool of %d thin images (listings also at %d), against the empty pool", fill, small)
	p, empty, remove, err := b.p8Pools(ctx)
	if err != nil {
		return fmt.Errorf("P8 pools: %w", err)
	}
	defer remove()
	secrets, err := b.secretDir()
	if err != nil {
		return err
	}
	// The sweep is measured apart (a plugin of its own below), so that
	// no pass runs inside the rates.
	full, err := b.startPlugin("full", "--mode", "controller", "--v", "2", "--controller-secret-dir", secrets, "--reclaim-sweep-interval", "0")
	if err != nil {
		return err
	}
	defer full.retire()
	details := map[string]any{"fill": fill, "small": small, "page": b.cfg.listPage, "volumes_per_round": b.cfg.fullVolumes,
		"concurrency": b.cfg.fullConcurrency, "rounds": b.cfg.fullRounds}
	b.rep.Details["p8"] = details
	warm, err := b.rates(ctx, full, p, empty, "warm")
	if err != nil {
		return fmt.Errorf("P8 warm-up: %w", err)
	}
	details["rates_both_empty"] = warm
	time.Sleep(restAfterWarmUp)
	mem0, err := b.memSnapshot(ctx, full, "p8_rss_empty")
	if err != nil {
		return err
	}
	b.logf("P8 both pools empty: %.1f vs %.1f creates/s, %.1f vs %.1f deletes/s (ratios %.2f, %.2f); RSS %.1f MiB",
		warm.CreateFull, warm.CreateEmpty, warm.DeleteFull, warm.DeleteEmpty, warm.CreateRatio, warm.DeleteRatio, mem0.rssMiB())

	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	raw := ceph.NewBackend(conns, ceph.BackendOptions{})
	lists := map[string]listing{}
	for _, at := range []int{small, fill} {
		have := 0
		if at == fill {
			have = small
		}
		took, err := b.fillPool(ctx, raw, p, have, at)
		if err != nil {
			return fmt.Errorf("P8 fill: %w", err)
		}
		b.logf("P8 filled %d..%d in %.1f s", have, at, took.Seconds())
		details[fmt.Sprintf("fill_%d_s", at)] = took.Seconds()
		for _, snaps := range []bool{false, true} {
			l, err := b.listAll(ctx, full, snaps, p.Name)
			if err != nil {
				return err
			}
			kind := map[bool]string{false: "volumes", true: "snapshots"}[snaps]
			if want := map[bool]int{false: at, true: snapsIn(at)}[snaps]; l.ByPool[p.Name] != want {
				return fmt.Errorf("P8: ListVolumes/ListSnapshots (%s) listed %d entries of pool %s, want %d", kind, l.ByPool[p.Name], p.Name, want)
			}
			lists[fmt.Sprintf("%s_%d", kind, at)] = l
			b.logf("P8 %s at %d images: %d entries in %d pages, %.2f s (%v)", kind, at, l.Entries, l.Pages, l.Seconds, l.Ops)
		}
	}
	details["listings"] = lists
	perImage := func(l listing, images int) float64 { return l.Seconds * 1000 / float64(images) }
	lv, ls := lists[fmt.Sprintf("volumes_%d", fill)], lists[fmt.Sprintf("volumes_%d", small)]
	b.rep.add(keyP8ListVolumes, vs(fmt.Sprintf("complete ListVolumes, pages of %d: time per 1,000 volumes at %d vs at %d (%d vs %d pages; %.1f vs %.1f OSD ops per volume)",
		b.cfg.listPage, fill, small, lv.Pages, ls.Pages, lv.OSDOps, ls.OSDOps), "s", lv.perK(), ls.perK(), fmt.Sprint(small)))
	sv, ss := lists[fmt.Sprintf("snapshots_%d", fill)], lists[fmt.Sprintf("snapshots_%d", small)]
	b.rep.add(keyP8ListSnapshots, vs(fmt.Sprintf("complete ListSnapshots, pages of %d: time per 1,000 images at %d vs at %d (one in %d with a snapshot; %d vs %d pages; %.0f vs %.0f OSD ops)",
		b.cfg.listPage, fill, small, snapEvery, sv.Pages, ss.Pages, sv.OSDOps*float64(max(sv.Entries, 1)), ss.OSDOps*float64(max(ss.Entries, 1))), "s", perImage(sv, fill), perImage(ss, small), fmt.Sprint(small)))

	rt, err := b.rates(ctx, full, p, empty, "full")
	if err != nil {
		return err
	}
	details["rates"] = rt
	b.logf("P8 full pool: %.1f creates/s, %.1f deletes/s; empty pool: %.1f, %.1f", rt.CreateFull, rt.DeleteFull, rt.CreateEmpty, rt.DeleteEmpty)
	create := vs(fmt.Sprintf("CreateVolume/s in a pool of %d images vs an empty pool (c=%d, %d per round, median of %d rounds' ratios; with both empty: %.2f)",
		fill, b.cfg.fullConcurrency, b.cfg.fullVolumes, b.cfg.fullRounds, warm.CreateRatio), "ops/s", rt.CreateFull, rt.CreateEmpty, "empty")
	create.Ratio = ptr(rt.CreateRatio)
	b.rep.add(keyP8Create, create)
	del := vs(fmt.Sprintf("DeleteVolume/s in a pool of %d images vs an empty pool (with both empty: %.2f)", fill, warm.DeleteRatio),
		"ops/s", rt.DeleteFull, rt.DeleteEmpty, "empty")
	del.Ratio = ptr(rt.DeleteRatio)
	b.rep.add(keyP8Delete, del)
	time.Sleep(restAfterWarmUp)
	memN, err := b.memSnapshot(ctx, full, "p8_rss_full")
	if err != nil {
		return err
	}
	b.rep.add(keyP8RSS, row{Measure: fmt.Sprintf("controller RSS growth, %d images (after the listings and rates) vs the empty pool: %.1f vs %.1f MiB", fill, memN.rssMiB(), mem0.rssMiB()),
		Unit: "MiB", Value: memN.rssMiB() - mem0.rssMiB()})
	full.retire()
	return b.p8Sweep(ctx, p, secrets, fill, mem0)
}

// p8Sweep starts a controller that sweeps every pool periodically and
// measures its first pass over the full pool (cold: nothing known clean
// since its start, as after a restart) and its second (the pool idle).
func (b *bench) p8Sweep(ctx context.Context, p rbd.Pool, secrets string, fill int, mem0 memStat) error {
	iv := b.cfg.sweepInterval
	sw, err := b.startPlugin("sweeper", "--mode", "controller", "--v", "2", "--controller-secret-dir", secrets, "--reclaim-sweep-interval", iv.String())
	if err != nil {
		return err
	}
	defer sw.retire()
	pools, err := b.sweptPools(ctx)
	if err != nil {
		return err
	}
	var passes []sweepPass
	for i := 0; i < 2; i++ {
		pass, err := b.sweepPass(ctx, sw, pools, 4*iv+b.cfg.nodeTimeout)
		if err != nil {
			return fmt.Errorf("P8 sweep pass %d: %w", i+1, err)
		}
		b.logf("P8 sweep pass %d over %d pools: %.2f s, %d OSD ops, %v", i+1, pools, pass.Seconds, pass.OSDOps, pass.Ops)
		passes = append(passes, pass)
	}
	b.rep.Details["p8_sweeps"] = passes
	reads := func(s sweepPass) float64 { return s.Ops["StatFamily"][0] + s.Ops["Stat"][0] }
	cold, idle := passes[0], passes[1]
	b.rep.add(keyP8SweepReads, row{Measure: fmt.Sprintf("images read by a sweep of the idle pool of %d images (the pass after the first, which read %.0f); %d vs %d OSD ops, %.2f vs %.2f s",
		fill, reads(cold), idle.OSDOps, cold.OSDOps, idle.Seconds, cold.Seconds), Unit: "images", Value: reads(idle)})
	b.rep.add(keyP8SweepTime, vs(fmt.Sprintf("sweep of the idle pool of %d images vs the first pass after the start", fill), "s", idle.Seconds, cold.Seconds, "first pass"))
	mem, err := b.memSnapshot(ctx, sw, "p8_rss_sweeper")
	if err != nil {
		return err
	}
	b.rep.add(keyP8SweepRSS, row{Measure: fmt.Sprintf("RSS of a controller that swept %d images (%.1f MiB) vs the listing one's in the empty pool (%.1f MiB)", fill, mem.rssMiB(), mem0.rssMiB()),
		Unit: "MiB", Value: mem.rssMiB() - mem0.rssMiB()})
	return nil
}

// sweptPools counts the pools a periodic sweep walks: every pool of the
// cluster with a name a volume ID can hold.
func (b *bench) sweptPools(ctx context.Context) (int, error) {
	out, err := b.c.admin(ctx, "ceph", "osd", "pool", "ls")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range strings.Fields(out) {
		if volid.ValidPool(name) == nil {
			n++
		}
	}
	return n, nil
}

// sweepPass is one periodic sweep of every pool, as the plugin's metrics
// and the OSDs saw it.
type sweepPass struct {
	Seconds float64               `json:"seconds"`
	Ops     map[string][2]float64 `json:"plugin_ceph_ops"`
	OSDOps  int64                 `json:"osd_ops"`
}

// sweepPass waits for the plugin's next periodic sweep of all pools and
// measures it: from the first sample with a sweep running (or done) to
// the last sweep's end, sampling the plugin's metrics every 20 ms (so a
// pass that quick reads as 0 to 0.02 s). The plugin does nothing else
// meanwhile.
func (b *bench) sweepPass(ctx context.Context, p *plugin, pools int, limit time.Duration) (sweepPass, error) {
	var pass sweepPass
	m0, err := scrapeMetrics(ctx, p.metricsAddr, parseSweep)
	if err != nil {
		return pass, err
	}
	osd0, err := b.osdOps(ctx)
	if err != nil {
		return pass, err
	}
	deadline := time.Now().Add(limit)
	var first time.Time
	for {
		if time.Now().After(deadline) {
			return pass, fmt.Errorf("no sweep of %d pools within %s", pools, limit)
		}
		time.Sleep(20 * time.Millisecond)
		m, err := scrapeMetrics(ctx, p.metricsAddr, parseSweep)
		if err != nil {
			return pass, err
		}
		// A tick that finds no pool due lists the pools and stops: the
		// pass starts with a sweep running (or done within one sample).
		if first.IsZero() && (m.running > 0 || m.swept != m0.swept) {
			first = time.Now()
		}
		if m.swept >= m0.swept+float64(pools) && m.running == 0 {
			pass.Seconds = time.Since(first).Seconds()
			pass.Ops = map[string][2]float64{}
			for op, v := range m.ops {
				if d := [2]float64{v[0] - m0.ops[op][0], v[1] - m0.ops[op][1]}; d[0] > 0 {
					pass.Ops[op] = d
				}
			}
			break
		}
	}
	osd1, err := b.osdOps(ctx)
	pass.OSDOps = osd1 - osd0
	return pass, err
}

// sweepMetrics are the sweep's series of a plugin's /metrics.
type sweepMetrics struct {
	ops     opStats
	swept   float64 // rbdcsi_sweeps_total, all results
	running float64 // rbdcsi_background_tasks{kind="sweep"}
}

func parseSweep(r io.Reader) (sweepMetrics, error) {
	var lines strings.Builder
	m := sweepMetrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case err != nil:
		case strings.HasPrefix(line, "rbdcsi_sweeps_total{"):
			m.swept += v
		case strings.HasPrefix(line, `rbdcsi_background_tasks{kind="sweep"}`):
			m.running = v
		}
		lines.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	var err error
	m.ops, err = parseOps(strings.NewReader(lines.String()))
	return m, err
}
