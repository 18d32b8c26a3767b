package main

// The scenario runners, P1 to P7 (P11 in cbt.go): each measures the driver and its
// reference in the same run and records the samples.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

func (b *bench) runP3(ctx context.Context, np *plugin) error {
	b.logf("P3: stage + unstage, 1 GiB vs 1 TiB, ext4 and xfs (fuse mapper)")
	runs, err := b.p3(ctx, np)
	b.rep.Details["p3"] = runs
	if err != nil {
		return err
	}
	for _, fs := range []string{"ext4", "xfs"} {
		var small, big, smallObj, bigObj []float64
		for _, r := range runs {
			if r.FS != fs {
				continue
			}
			if r.Size == tib {
				big, bigObj = append(big, r.StageS+r.UnstageS), append(bigObj, float64(r.Objects))
			} else {
				small, smallObj = append(small, r.StageS+r.UnstageS), append(smallObj, float64(r.Objects))
			}
		}
		key := map[string]string{"ext4": keyP3Ext4, "xfs": keyP3XFS}[fs]
		b.rep.add(key, vs(fmt.Sprintf("%s stage + unstage: 1 TiB vs 1 GiB (median of %d; mkfs wrote %.0f vs %.0f RBD objects)", fs, b.cfg.stageRounds, median(bigObj), median(smallObj)),
			"s", median(big), median(small), "1 GiB"))
		if fs == "ext4" {
			b.ext4ObjectRows(runs)
		}
	}
	var delSmall, delBig []float64
	for _, r := range runs {
		if r.Size == tib {
			delBig = append(delBig, r.DeleteS)
		} else {
			delSmall = append(delSmall, r.DeleteS)
		}
	}
	b.rep.add(keyP3Delete, vs(fmt.Sprintf("DeleteVolume after staging: 1 TiB vs 1 GiB (image features %s)", strings.Join(b.c.features(), ",")), "s", median(delBig), median(delSmall), "1 GiB"))
	return nil
}

func (b *bench) runP7(ctx context.Context, np *plugin) error {
	b.logf("P7: %d volumes staged at concurrency 1 vs %d", b.cfg.parallelVolumes, b.cfg.parallelConcurrency)
	runs, err := b.p7(ctx, np)
	b.rep.Details["p7"] = runs
	if err != nil {
		return err
	}
	var serial, parallel, serialU, parallelU []float64
	for _, r := range runs {
		if r.Concurrency == 1 {
			serial, serialU = append(serial, r.StageS), append(serialU, r.UnstageS)
		} else {
			parallel, parallelU = append(parallel, r.StageS), append(parallelU, r.UnstageS)
		}
	}
	// The ratio is the speed-up: serial time / parallel time.
	b.rep.add(keyP7Stage, vs(fmt.Sprintf("stage %d volumes: c=%d vs c=1 (speed-up)", b.cfg.parallelVolumes, b.cfg.parallelConcurrency),
		"s", median(parallel), median(serial), "c=1"))
	b.rep.add(keyP7Unstage, vs(fmt.Sprintf("unstage %d volumes: c=%d vs c=1 (speed-up)", b.cfg.parallelVolumes, b.cfg.parallelConcurrency),
		"s", median(parallelU), median(serialU), "c=1"))
	return nil
}

func (b *bench) runP4(ctx context.Context, p *plugin) error {
	b.logf("P4: restore from a snapshot, %d MiB written vs none", b.cfg.restoreData/mib)
	res, err := b.p4(ctx, p)
	b.rep.Details["p4"] = res
	if err != nil {
		return err
	}
	b.rep.add(keyP4Restore, vs(fmt.Sprintf("restore from snapshot: %d MiB written vs empty (median of %d; copy-on-write: %v)", b.cfg.restoreData/mib, b.cfg.restoreRounds, res.AllCopyOnWrite),
		"s", res.FullMedianS, res.EmptyMedianS, "empty"))
	return nil
}

func (b *bench) runP1(ctx context.Context, quiet, verbose *plugin) error {
	b.logf("P1/P2/P6: %d creates then %d deletes per round, concurrency %v, %d rounds", b.cfg.n, b.cfg.n, b.cfg.concurrency, b.cfg.rounds)
	var logBefore int64
	if verbose != nil {
		logBefore = verbose.logBytes()
	}
	runs, peak, sampled, err := b.p1(ctx, quiet, verbose)
	b.rep.Details["p1"] = runs
	if err != nil {
		return err
	}
	pick := func(sideName string, c int, f func(provisionRun) float64) float64 {
		var xs []float64
		for _, r := range runs {
			if r.Side == sideName && r.Concurrency == c {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	// The ratio is the median of the rounds' ratios: within a round the
	// sides ran back to back, so that slow drift of a shared machine's
	// load cancels out.
	ratio := func(side, ref string, c int, f func(provisionRun) float64) float64 {
		by := map[int]map[string]float64{}
		for _, r := range runs {
			if r.Concurrency == c {
				if by[r.Round] == nil {
					by[r.Round] = map[string]float64{}
				}
				by[r.Round][r.Side] = f(r)
			}
		}
		var xs []float64
		for _, m := range by {
			if m[ref] > 0 {
				xs = append(xs, m[side]/m[ref])
			}
		}
		return median(xs)
	}
	compare := func(key, measure string, c int, side, ref, refName string, f func(provisionRun) float64) {
		rw := vs(measure, "ops/s", pick(side, c, f), pick(ref, c, f), refName)
		rw.Ratio = ptr(ratio(side, ref, c, f))
		load := &loadSpan{}
		for _, r := range runs {
			if r.Concurrency == c && (r.Side == side || r.Side == ref) {
				load.merge(r.Load)
			}
		}
		b.rep.add(key, rw).Load = load.String()
	}
	create := func(r provisionRun) float64 { return r.CreatePerSec }
	reclaim := func(r provisionRun) float64 { return r.ReclaimPerSec }
	sc := b.cfg.scenarios
	for _, c := range b.cfg.concurrency {
		if sc["P1"] {
			compare(keyP1Create, fmt.Sprintf("CreateVolume, c=%d (N=%d, median of %d rounds)", c, b.cfg.n, b.cfg.rounds), c, "driver", "raw", "raw", create)
		}
	}
	for _, c := range b.cfg.concurrency {
		if sc["P2"] {
			compare(keyP2Reclaim, fmt.Sprintf("DeleteVolume until reclaimed, c=%d", c), c, "driver", "raw", "raw", reclaim)
		}
	}
	// The same deletes against the raw limit of a delete that reads the
	// image before removing it, as DeleteVolume must (attachments,
	// watchers, snapshots, parent): what is left is the driver's own cost.
	for _, c := range b.cfg.concurrency {
		if sc["P2"] {
			compare(keyP2ReclaimRead, fmt.Sprintf("DeleteVolume until reclaimed vs raw read + remove, c=%d", c), c, "driver", "raw-checked", "raw read+remove", reclaim)
		}
	}
	// The gRPC floor: the same Ceph work served over gRPC by a controller
	// that does nothing else. Against it, the driver's own cost; it against
	// the raw client, what serving calls in a process of its own costs.
	// These rows explain the ones against raw librbd; they hold no target.
	if b.gfloor != nil {
		for _, c := range b.cfg.concurrency {
			if sc["P1"] {
				compare(keyP1CreateGFloor, fmt.Sprintf("CreateVolume vs the gRPC floor, c=%d", c), c, "driver", "grpc-floor", "gRPC floor", create)
			}
			if sc["P2"] {
				compare(keyP2ReclaimGFloor, fmt.Sprintf("DeleteVolume until reclaimed vs the gRPC floor (read + remove), c=%d", c), c, "driver", "grpc-floor", "gRPC floor", reclaim)
			}
		}
		for _, c := range b.cfg.concurrency {
			if sc["P1"] {
				compare(keyP1GFloorRaw, fmt.Sprintf("(not the driver) the gRPC floor's CreateVolume vs raw, c=%d", c), c, "grpc-floor", "raw", "raw", create)
			}
		}
	}
	// CPU per call of every process we started (plugin or this process,
	// Ceph daemons): what the ratio would be on CPUs this workload alone
	// saturates, whatever else the machine was running.
	cpu := func(sideName string, f func(provisionRun) cpuUse) float64 {
		var xs []float64
		for _, r := range runs {
			if r.Side != sideName {
				continue
			}
			total := 0.0
			for proc, ms := range f(r).MsPerOp {
				if proc != "others" {
					total += ms
				}
			}
			xs = append(xs, total)
		}
		return median(xs)
	}
	b.rep.Details["p1_cpu_ms_per_call"] = map[string]float64{
		"create_driver":      cpu("driver", func(r provisionRun) cpuUse { return r.CreateCPU }),
		"create_raw":         cpu("raw", func(r provisionRun) cpuUse { return r.CreateCPU }),
		"delete_driver":      cpu("driver", func(r provisionRun) cpuUse { return r.DeleteCPU }),
		"delete_raw":         cpu("raw", func(r provisionRun) cpuUse { return r.DeleteCPU }),
		"delete_raw_checked": cpu("raw-checked", func(r provisionRun) cpuUse { return r.DeleteCPU }),
		"create_grpc_floor":  cpu("grpc-floor", func(r provisionRun) cpuUse { return r.CreateCPU }),
		"delete_grpc_floor":  cpu("grpc-floor", func(r provisionRun) cpuUse { return r.DeleteCPU }),
	}
	if verbose != nil && sc["P6"] {
		for _, c := range b.cfg.concurrency {
			compare(keyP6Verbose, fmt.Sprintf("CreateVolume at --v=5 vs --v=2 (the manifests'), c=%d", c), c, "driver-v5", "driver", "--v=2", create)
		}
		ops := int64(len(b.cfg.concurrency) * b.cfg.rounds * b.cfg.n * 2)
		b.rep.Details["p6_log_bytes_per_call"] = float64(verbose.logBytes()-logBefore) / float64(ops)
	}
	if sc["P5"] {
		top := slices.Max(b.cfg.concurrency)
		b.rep.Details["p5_peak"] = map[string]any{"concurrency": top, "mem": peak, "sampled_max_rss_kib": sampled}
		after, err := b.memSnapshot(ctx, quiet, "p5_after_p1")
		if err != nil {
			return err
		}
		floor, err := b.floorBurst(ctx, b.floor)
		if err != nil {
			return fmt.Errorf("P5 floor: %w", err)
		}
		b.logf("P5 floor, a bare go-ceph client, after one P1 round of its Ceph work at c=%d: VmHWM %.1f MiB (%s)", top, floor.hwmMiB(), memParts(floor))
		b.rep.add(keyP5Peak, vs(fmt.Sprintf("plugin peak RSS during P1 at c=%d (VmHWM; right after: %s)", top, memPartsVs(after, floor, false)),
			"MiB", max(peak.hwmMiB(), float64(sampled)/1024), floor.hwmMiB(), "bare go-ceph client"))
		if b.gfloor != nil {
			gf, err := b.memSnapshot(ctx, b.gfloor, "p5_grpc_floor_peak")
			if err != nil {
				return err
			}
			b.logf("P5 gRPC floor, after serving P1 beside the driver: VmHWM %.1f MiB (%s)", gf.hwmMiB(), memParts(gf))
			b.rep.add(keyP5PeakGFloor, vs(fmt.Sprintf("plugin peak RSS during P1 at c=%d vs the gRPC floor's (VmHWM; right after: %s)", top, memPartsVs(after, gf, false)),
				"MiB", max(peak.hwmMiB(), float64(sampled)/1024), gf.hwmMiB(), "gRPC floor"))
		}
	}
	return nil
}

func (b *bench) runP5(ctx context.Context, p *plugin) error {
	b.logf("P5: %d create/delete cycles at concurrency %d", b.cfg.cycles, b.cfg.cycleConcurrency)
	before, err := readMem(p.pid())
	if err != nil {
		return err
	}
	points, took, err := b.p5cycles(ctx, p)
	b.rep.Details["p5_cycles"] = map[string]any{"before": before, "checkpoints": points, "took_s": took.Seconds()}
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	if _, err := b.memSnapshot(ctx, p, "p5_after_cycles"); err != nil {
		return err
	}
	// A leak grows with the cycles; the heap's and malloc arenas' way to
	// their working size slows down. The verdict is on the second half of
	// the cycles; the whole course is in the measure and the JSON.
	first, mid, last := points[0], points[max(0, len(points)/2-1)], points[len(points)-1]
	growth := last.rssMiB() - mid.rssMiB()
	b.rep.add(keyP5Growth, row{Measure: fmt.Sprintf("RSS growth over create/delete cycles %d..%d (c=%d; %.1f MiB at %d, %.1f at %d, %.1f at %d; fds %d -> %d)",
		mid.Cycles, last.Cycles, b.cfg.cycleConcurrency, first.rssMiB(), first.Cycles, mid.rssMiB(), mid.Cycles, last.rssMiB(), last.Cycles, first.FDs, last.FDs),
		Unit: "MiB", Value: growth})
	return nil
}

// memSnapshot reads a plugin's memory three ways, for the report's
// details under key: /proc status, the Go runtime's own figures from its
// metrics, and the RSS by mapped file.
func (b *bench) memSnapshot(ctx context.Context, p *plugin, key string) (memStat, error) {
	return b.memDetails(ctx, p.pid(), p.metricsAddr, key)
}

// memDetails is memSnapshot of any process; metricsAddr "" (the floor
// serves no metrics) leaves the Go runtime's figures out.
func (b *bench) memDetails(ctx context.Context, pid int, metricsAddr, key string) (memStat, error) {
	m, err := readMem(pid)
	if err != nil {
		return m, err
	}
	snap := map[string]any{"status": m}
	if metricsAddr != "" {
		if g, err := scrapeGoMem(ctx, metricsAddr); err == nil {
			snap["go"] = g
		}
	}
	if maps, err := rssByMapping(pid); err == nil {
		snap["rss_by_mapping"] = maps[:min(len(maps), 12)]
	}
	b.rep.Details[key] = snap
	return m, nil
}

func kib(n int64) float64 { return float64(n) / 1024 }
