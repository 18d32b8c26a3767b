package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// provisionRun is one side's N creates then N deletes at one concurrency.
type provisionRun struct {
	Side         string  `json:"side"`
	Concurrency  int     `json:"concurrency"`
	Round        int     `json:"round"`
	N            int     `json:"n"`
	CreatePerSec float64 `json:"create_per_s"`
	DeletePerSec float64 `json:"delete_per_s"`
	// ReclaimPerSec counts the deletes until the storage is gone from the
	// pool (no image, trash entry, rbd task or RBD object left).
	ReclaimPerSec float64 `json:"reclaim_per_s"`
	ReclaimWaitS  float64 `json:"reclaim_wait_s"`
	// Where the time went: CPU per call by process, and the Ceph
	// operations behind each call.
	CreateCPU cpuUse           `json:"create_cpu"`
	DeleteCPU cpuUse           `json:"delete_cpu"`
	CreateOps map[string]opUse `json:"create_ceph_ops"`
	DeleteOps map[string]opUse `json:"delete_ceph_ops"`
	// Load is the machine's load average at the start and the end.
	Load *loadSpan `json:"load"`
}

// phaseProfiler records the creates and the deletes of one provision run
// under perf, each phase apart: their costs differ (a delete's read) and
// one profile of both hides which phase a difference comes from.
type phaseProfiler struct {
	b    *bench
	pid  int
	side string
	c    int
	cur  *profiler
}

func (p *phaseProfiler) start(phase string) error {
	if p == nil {
		return nil
	}
	if err := os.MkdirAll(p.b.cfg.out, 0o755); err != nil {
		return err
	}
	var err error
	p.cur, err = startPerf(p.pid, filepath.Join(p.b.cfg.out, fmt.Sprintf("bench-%s-perf-%s-c%d-%s.data", p.b.stamp, p.side, p.c, phase)))
	return err
}

func (p *phaseProfiler) stop(phase string) {
	if p == nil || p.cur == nil {
		return
	}
	sum, err := p.cur.stop()
	p.cur = nil
	if err != nil {
		p.b.logf("  perf: %v", err)
	}
	p.b.rep.Details[fmt.Sprintf("perf_%s_c%d_%s", p.side, p.c, phase)] = sum
	if len(sum.ByDSO) > 0 {
		p.b.logf("  perf %s c=%d %s, %s, by shared object: %s", p.side, p.c, phase, sum.Samples, strings.Join(sum.ByDSO[:min(6, len(sum.ByDSO))], ", "))
	}
}

func (b *bench) provision(ctx context.Context, s side, c, round int, prof *phaseProfiler) (provisionRun, error) {
	tag := fmt.Sprintf("c%d-r%d", c, round)
	n := b.cfg.n
	r := provisionRun{Side: s.name, Concurrency: c, Round: round, N: n, Load: newLoadSpan()}
	defer r.Load.sample()
	ops0, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	if err := prof.start("create"); err != nil {
		return r, err
	}
	cpu0 := b.watch.sample()
	took, err := runOps(ctx, n, c, func(ctx context.Context, i int) error { return s.create(ctx, tag, i) })
	prof.stop("create")
	if err != nil {
		return r, fmt.Errorf("%s creates at c=%d: %w", s.name, c, err)
	}
	cpu1 := b.watch.sample()
	r.CreatePerSec = float64(n) / took.Seconds()
	r.CreateCPU = cpu1.since(cpu0, n)
	ops1, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	r.CreateOps = ops1.since(ops0, n)

	if err := prof.start("delete"); err != nil {
		return r, err
	}
	cpu1 = b.watch.sample()
	took, err = runOps(ctx, n, c, func(ctx context.Context, i int) error { return s.remove(ctx, tag, i) })
	prof.stop("delete")
	if err != nil {
		return r, fmt.Errorf("%s deletes at c=%d: %w", s.name, c, err)
	}
	cpu2 := b.watch.sample()
	r.DeletePerSec = float64(n) / took.Seconds()
	r.DeleteCPU = cpu2.since(cpu1, n)
	gone, err := b.waitPoolClean(ctx, 2*time.Minute)
	if err != nil {
		return r, fmt.Errorf("%s deletes at c=%d: %w", s.name, c, err)
	}
	// Gone at the first look: the deletes' own wall time counts.
	total := max(took, gone.Sub(cpu1.at))
	r.ReclaimPerSec = float64(n) / total.Seconds()
	r.ReclaimWaitS = (total - took).Seconds()
	ops2, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	r.DeleteOps = ops2.since(ops1, n)
	return r, nil
}

// p1 runs P1 (provisioning), P2 (reclaim) and P6 (logging cost) in one
// interleaved loop, and measures P5's peak at the highest concurrency:
// every round runs each side in turn (the order rotating by round), so
// that drift on a noisy machine hits all sides alike.
func (b *bench) p1(ctx context.Context, quiet, verbose *plugin) ([]provisionRun, memStat, int64, error) {
	sides := []side{b.rawSide(b.cfg.size), b.rawCheckedSide(b.cfg.size), b.pluginSide("driver", quiet, b.cfg.size)}
	if b.gfloor != nil {
		sides = append(sides, b.pluginSide("grpc-floor", b.gfloor, b.cfg.size))
	}
	if verbose != nil {
		sides = append(sides, b.pluginSide("driver-v5", verbose, b.cfg.size))
	}
	var runs []provisionRun
	var peak memStat
	var sampled int64
	top := 0
	for _, c := range b.cfg.concurrency {
		top = max(top, c)
	}
	for _, c := range b.cfg.concurrency {
		var sampler *rssSampler
		if c == top {
			if err := resetPeak(quiet.pid()); err != nil {
				return nil, peak, 0, fmt.Errorf("resetting the plugin's VmHWM: %w", err)
			}
			if b.gfloor != nil {
				if err := resetPeak(b.gfloor.pid()); err != nil {
					return nil, peak, 0, fmt.Errorf("resetting the gRPC floor's VmHWM: %w", err)
				}
			}
			sampler = sampleRSS(quiet.pid(), 50*time.Millisecond)
		}
		for round := 0; round < b.cfg.rounds; round++ {
			for k := range sides {
				s := sides[(k+round)%len(sides)]
				var prof *phaseProfiler
				if b.cfg.perf && c == top && round == 0 && (s.name == "raw" || s.name == "driver" || s.name == "grpc-floor") {
					pid := quiet.pid()
					switch s.name {
					case "raw":
						pid = os.Getpid()
					case "grpc-floor":
						pid = b.gfloor.pid()
					}
					prof = &phaseProfiler{b: b, pid: pid, side: s.name, c: c}
				}
				r, err := b.provision(ctx, s, c, round, prof)
				if err != nil {
					if sampler != nil {
						sampler.finish()
					}
					return nil, peak, 0, err
				}
				proc := "plugin-" + s.name
				if strings.HasPrefix(s.name, "raw") {
					proc = "bench"
				}
				b.logf("  P1/P2 c=%-2d round %d %-11s create %6.1f/s (CPU ms/call: %s %.1f, osd %.1f, others %.1f)  delete %5.1f/s (%s %.1f, osd %.1f, others %.1f)  reclaimed %5.1f/s",
					c, round+1, s.name, r.CreatePerSec, proc, r.CreateCPU.MsPerOp[proc], r.CreateCPU.MsPerOp["ceph-osd"], r.CreateCPU.MsPerOp["others"],
					r.DeletePerSec, proc, r.DeleteCPU.MsPerOp[proc], r.DeleteCPU.MsPerOp["ceph-osd"], r.DeleteCPU.MsPerOp["others"], r.ReclaimPerSec)
				runs = append(runs, r)
			}
		}
		if sampler != nil {
			sampled = sampler.finish()
			var err error
			if peak, err = readMem(quiet.pid()); err != nil {
				return nil, peak, 0, err
			}
		}
	}
	return runs, peak, sampled, nil
}

// cycleMem is the plugin's memory after a number of create/delete cycles.
type cycleMem struct {
	Cycles int `json:"cycles"`
	memStat
}

// p5cycles runs create/delete cycles on the quiet plugin and reads its
// memory at ten checkpoints.
func (b *bench) p5cycles(ctx context.Context, p *plugin) ([]cycleMem, time.Duration, error) {
	s := b.pluginSide("driver", p, b.cfg.cycleSize)
	total, c := b.cfg.cycles, b.cfg.cycleConcurrency
	step := max(1, total/10)
	var out []cycleMem
	start := time.Now()
	for done := 0; done < total; {
		n := min(step, total-done)
		tag := fmt.Sprintf("cycle%d", done)
		_, err := runOps(ctx, n, c, func(ctx context.Context, i int) error {
			if err := s.create(ctx, tag, i); err != nil {
				return err
			}
			return s.remove(ctx, tag, i)
		})
		if err != nil {
			return out, 0, fmt.Errorf("create/delete cycles: %w", err)
		}
		done += n
		m, err := readMem(p.pid())
		if err != nil {
			return out, 0, err
		}
		out = append(out, cycleMem{Cycles: done, memStat: m})
		b.logf("  P5 %5d cycles: VmRSS %.1f MiB, %d threads, %d fds", done, m.rssMiB(), m.Threads, m.FDs)
	}
	return out, time.Since(start), nil
}
