// Command bench measures the plugin against baselines taken in the same
// run: `make bench` runs it against a throwaway local Ceph
// cluster booted by scripts/with-cluster.sh, through the real plugin
// binary on its real unix socket.
//
//	P1 provisioning: CreateVolume/s vs raw go-ceph create + metadata, at each concurrency
//	P2 reclaim:      DeleteVolume/s until the storage is gone vs raw image removal
//	P3 staging:      NodeStage + NodeUnstage of a 1 TiB vs a 1 GiB volume (ext4, xfs; fuse mapper)
//	P4 restore:      restore from a snapshot of a volume with 1 GiB written vs none
//	P5 memory:       plugin RSS idle, peak at the top concurrency, growth over create/delete cycles
//	P6 logging:      P1 with --v=5 vs --v=2 (the manifests' verbosity)
//	P7 parallel:     16 volumes staged at concurrency 1 vs 8
//	P8 full pool:    creates, deletes, listings, a sweep and RSS in a pool of 10,000 images vs empty (or a tenth)
//	P9 many nodes:   1,000 nodes heartbeating: Ceph ops/s, ControllerPublish latency, registry size vs 1 node
//	P10 data path:   IOPS and MB/s through krbd, rbd-nbd and LUKS2 on krbd vs rbd bench (librbd), in the kernel VM only (make bench-data)
//	P11 changed blocks: a delta's bytes and listing time vs a full backup's; a thin 1 TiB volume's listing vs 1 GiB
//
// Every figure with a target is a ratio against a reference measured in
// the same run (P5's are budgets in MiB, P3's objects a set the made
// filesystem's geometry gives); nothing here asserts on time. The targets
// are one table (targets.go), fixed before the run; every side of a
// comparison starts under one environment (launch.go), which the results
// print.
// The table goes to stdout and, with the JSON of every sample (CPU per
// call by process, the Ceph operations behind each call, memory by
// mapping), to the results directory. The plugins run as the manifests
// run them: --v=2 and --metrics-address.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	// Named apart: the bench has a type named cluster.
	cephcluster "github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

type benchConfig struct {
	plugin, floor, grpcFloor string
	out                      string
	cpuprofile               string
	n, rounds                int
	concurrency              []int
	cycles, cycleConcurrency int
	size, cycleSize          int64
	stageRounds              int
	parallelVolumes          int
	parallelConcurrency      int
	parallelRounds           int
	restoreData              int64
	restoreRounds            int
	scenarios                map[string]bool
	callTimeout, nodeTimeout time.Duration
	keepWork                 bool
	perf                     bool
	imageFeatures            string
	gomaxprocs               int
	// P8 and P9
	fill, fillConcurrency   int
	listPage                int
	fullVolumes, fullRounds int
	fullConcurrency         int
	sweepInterval           time.Duration
	nodes, publishes        int
	heartbeat               time.Duration
	// P10
	dataSize, dataSeq, dataRand int64
	dataDepth, dataRounds       int
	guestOf                     string
}

type bench struct {
	cfg   benchConfig
	stamp string
	c     cluster
	work  string
	runID string
	led   *ledger
	raw   *ceph.Backend
	pool  rbd.Pool
	rep   *report
	start time.Time
	// watch accounts CPU per phase; rawOps times the raw baseline's Ceph
	// operations as the plugin's metrics time its own.
	watch  cpuWatch
	rawOps *rawObserver

	// env is the environment of every side (launch.go); sides records
	// how each started.
	env     []string
	sides   *sidesReport
	plugins []*plugin
	floor   *floorProc // P5's floor, while P1 runs
	// gfloor is the gRPC floor (e2e/bench/grpcfloor), a side of P1 and P2
	// and a reference of P5; nil when neither runs.
	gfloor *plugin
	// extraLeft is what P8 and P9 could not remove.
	extraLeft []string
}

func parseFlags() (benchConfig, error) {
	var cfg benchConfig
	var conc, scen string
	var data int64
	flag.StringVar(&cfg.plugin, "plugin", "bin/rbdplugin", "plugin binary")
	flag.StringVar(&cfg.floor, "floor", "bin/rbdfloor", "P5's floor: a bare go-ceph client (e2e/bench/floor)")
	flag.StringVar(&cfg.grpcFloor, "grpc-floor", "bin/rbdgrpcfloor", "P1, P2 and P5's gRPC floor: a minimal CSI controller (e2e/bench/grpcfloor)")
	flag.StringVar(&cfg.out, "out", "results", "directory for bench-<time>.json and .md")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write this process's CPU profile here (client side and raw baseline)")
	flag.IntVar(&cfg.n, "n", 200, "P1/P2/P6: volumes created then deleted per measurement")
	flag.StringVar(&conc, "concurrency", "1,4,16", "P1/P2/P6: concurrencies; the highest one also gives P5's peak")
	flag.IntVar(&cfg.rounds, "rounds", 5, "P1/P2/P6: rounds per concurrency (a ratio is the median of the rounds' ratios)")
	var sizeMiB, cycleMiB int64
	flag.Int64Var(&sizeMiB, "size-mib", 1024, "P1/P2/P6: volume size in MiB (thin; DeleteVolume without object-map visits every 4 MiB object)")
	flag.IntVar(&cfg.cycles, "cycles", 5000, "P5: create/delete cycles")
	flag.Int64Var(&cycleMiB, "cycle-size-mib", 64, "P5: volume size of the cycles in MiB")
	flag.IntVar(&cfg.cycleConcurrency, "cycle-concurrency", 16, "P5: concurrency of the cycles")
	flag.IntVar(&cfg.stageRounds, "stage-rounds", 2, "P3: stage/unstage rounds per filesystem and size")
	flag.IntVar(&cfg.parallelVolumes, "parallel-volumes", 16, "P7: volumes per batch")
	flag.IntVar(&cfg.parallelConcurrency, "parallel-concurrency", 8, "P7: the parallel concurrency (compared with 1)")
	flag.IntVar(&cfg.parallelRounds, "parallel-rounds", 2, "P7: rounds (each stages a fresh batch at both concurrencies)")
	flag.Int64Var(&data, "restore-data-mib", 1024, "P4: MiB written into the volume before its snapshot")
	flag.IntVar(&cfg.restoreRounds, "restore-rounds", 5, "P4: restores from each snapshot")
	flag.IntVar(&cfg.fill, "fill", 10000, "P8: thin images in the full pool (the listings are also timed at a tenth of them)")
	flag.IntVar(&cfg.fillConcurrency, "fill-concurrency", 16, "P8: concurrency of the raw librbd fill")
	flag.IntVar(&cfg.listPage, "list-page", 100, "P8: max_entries of each ListVolumes and ListSnapshots page")
	flag.IntVar(&cfg.fullVolumes, "full-volumes", 100, "P8: volumes created then deleted per round, in the empty and in the full pool")
	flag.IntVar(&cfg.fullConcurrency, "full-concurrency", 4, "P8: concurrency of those creates and deletes")
	flag.IntVar(&cfg.fullRounds, "full-rounds", 3, "P8: rounds of creates and deletes (the rate is the median)")
	flag.DurationVar(&cfg.sweepInterval, "sweep-interval", 10*time.Second, "P8: --reclaim-sweep-interval of the controller whose sweeps are measured")
	flag.IntVar(&cfg.nodes, "nodes", 1000, "P9: simulated nodes heartbeating in the node registry")
	flag.IntVar(&cfg.publishes, "publishes", 20, "P9: ControllerPublishVolume calls timed with 1 node and with -nodes")
	flag.DurationVar(&cfg.heartbeat, "heartbeat", 2*time.Minute/5, "P9: heartbeat interval (the deployed one: --node-registry-ttl's default, 2m, over 5)")
	var dataSize, dataSeq, dataRand int64
	flag.Int64Var(&dataSize, "data-size-mib", 256, "P10: size of each side's volume in MiB")
	flag.Int64Var(&dataSeq, "data-seq-mib", 512, "P10: MiB each 1M sequential run writes or reads (it wraps around the volume)")
	flag.Int64Var(&dataRand, "data-rand-mib", 32, "P10: MiB each 4K random run writes or reads")
	flag.IntVar(&cfg.dataDepth, "data-depth", 16, "P10: I/Os in flight (rbd bench's --io-threads, fio's --iodepth)")
	flag.IntVar(&cfg.dataRounds, "data-rounds", 3, "P10: rounds of every pattern on every side (a ratio is the median of the rounds' ratios)")
	flag.StringVar(&loadFile, "load-file", loadFile, "where the load average is read (first line) and, if another file than /proc/loadavg, the host's /proc/stat cpu line (second): scripts/bench-data.sh gives the guest the host's")
	flag.StringVar(&cfg.guestOf, "guest-of", "", "P10: what the guest is and runs on, for the results (scripts/bench-data.sh says it)")
	flag.StringVar(&scen, "scenarios", "P1,P2,P3,P4,P5,P6,P7,P8,P9,P11", "scenarios to run (P2 and P6 ride along with P1); P10 runs alone, in the kernel VM (make bench-data)")
	flag.DurationVar(&cfg.callTimeout, "call-timeout", time.Minute, "deadline of each controller call")
	flag.DurationVar(&cfg.nodeTimeout, "node-timeout", 5*time.Minute, "deadline of each node call and of the DeleteVolume of P3's 1 TiB volumes")
	flag.StringVar(&cfg.imageFeatures, "image-features", "", "StorageClass imageFeatures for every volume (and the raw baseline); empty: the driver's default for single-writer volumes")
	flag.BoolVar(&cfg.keepWork, "keep-work", false, "keep the work directory (plugin logs) after the run")
	flag.IntVar(&cfg.gomaxprocs, "gomaxprocs", runtime.NumCPU(), "GOMAXPROCS of every side: this process (the raw sides), the floors and the plugins")
	flag.BoolVar(&cfg.perf, "perf", false, "profile the plugin and the gRPC floor with perf record during their first P1 round at the top concurrency, and this process during the raw baseline's, creates and deletes apart (summaries with sample counts in the JSON, perf.data in the results directory)")
	flag.Parse()
	if flag.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %v", flag.Args())
	}
	for _, s := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("-concurrency: bad value %q", s)
		}
		cfg.concurrency = append(cfg.concurrency, n)
	}
	cfg.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		s = strings.ToUpper(strings.TrimSpace(s))
		if !slices.Contains([]string{"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11"}, s) {
			return cfg, fmt.Errorf("-scenarios: unknown %q", s)
		}
		cfg.scenarios[s] = true
	}
	if cfg.scenarios["P10"] && len(cfg.scenarios) > 1 {
		return cfg, errors.New("-scenarios: P10 runs alone, in the kernel VM (make bench-data)")
	}
	if cfg.n < 1 || cfg.rounds < 1 || cfg.gomaxprocs < 1 || cfg.cycles < 0 || cfg.cycleConcurrency < 1 || cfg.stageRounds < 1 ||
		cfg.parallelVolumes < 1 || cfg.parallelConcurrency < 1 || cfg.parallelRounds < 1 || data < 1 || cfg.restoreRounds < 1 ||
		cfg.fill < 1 || cfg.fillConcurrency < 1 || cfg.listPage < 0 || cfg.fullVolumes < 1 || cfg.fullConcurrency < 1 || cfg.fullRounds < 1 ||
		cfg.sweepInterval <= 0 || cfg.nodes < 1 || cfg.publishes < 1 || cfg.heartbeat <= 0 ||
		dataSize < 1 || dataSeq < 1 || dataRand < 1 || cfg.dataDepth < 1 || cfg.dataRounds < 1 {
		return cfg, errors.New("counts must be positive")
	}
	cfg.restoreData = data * mib
	if sizeMiB < 1 || cycleMiB < 1 {
		return cfg, errors.New("sizes must be positive")
	}
	cfg.size, cfg.cycleSize = sizeMiB*mib, cycleMiB*mib
	cfg.dataSize, cfg.dataSeq, cfg.dataRand = dataSize*mib, dataSeq*mib, dataRand*mib
	return cfg, nil
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := reexecAlike(cfg.gomaxprocs); err != nil {
		fmt.Fprintln(os.Stderr, "bench: restarting under the sides' environment:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cfg))
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg benchConfig) int {
	c, err := loadCluster()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	c.imageFeatures = cfg.imageFeatures
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	sides, err := newSidesReport(cfg.gomaxprocs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	work, err := os.MkdirTemp("", "rbdcsi-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	now := time.Now()
	b := &bench{
		cfg: cfg, c: c, work: work, env: sideEnv(os.Environ(), cfg.gomaxprocs), sides: sides, runID: strconv.FormatInt(now.Unix()%100000, 36), led: newLedger(), start: now,
		rep: &report{Started: now.Format(time.RFC3339), Details: map[string]any{}},
	}
	b.rep.Sides, b.rep.Targets = sides, targets()
	b.rep.Host = hostInfo(ctx, c, cfg.guestOf)
	b.rep.Config = map[string]any{
		"n": cfg.n, "size_bytes": cfg.size, "cycle_size_bytes": cfg.cycleSize, "concurrency": cfg.concurrency, "rounds": cfg.rounds, "cycles": cfg.cycles,
		"cycle_concurrency": cfg.cycleConcurrency, "stage_rounds": cfg.stageRounds,
		"parallel_volumes": cfg.parallelVolumes, "parallel_concurrency": cfg.parallelConcurrency,
		"parallel_rounds": cfg.parallelRounds, "restore_data_bytes": cfg.restoreData, "restore_rounds": cfg.restoreRounds,
		"scenarios": keys(cfg.scenarios), "image_features": cfg.imageFeatures, "gomaxprocs": cfg.gomaxprocs,
		"fill": cfg.fill, "list_page": cfg.listPage, "sweep_interval": cfg.sweepInterval.String(),
		"nodes": cfg.nodes, "heartbeat": cfg.heartbeat.String(),
	}
	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	b.rawOps = &rawObserver{ops: opStats{}}
	b.raw = ceph.NewBackend(conns, ceph.BackendOptions{Observer: b.rawOps})
	b.watch = cpuWatch{pids: cephPIDs(c.Dir)}
	b.watch.pids["bench"] = []int{os.Getpid()}
	b.pool = rbd.Pool{MonHost: c.MonHost, Cred: cephcluster.Credentials{ID: c.CSIUser, Key: c.CSIKey}, Name: c.Pool}

	b.stamp = now.Format("20060102-150405")
	if cfg.scenarios["P10"] {
		b.inGuest()
	}
	runErr := b.scenarios(ctx)
	if runErr != nil {
		b.logf("FAILED: %v", runErr)
		b.rep.Error = runErr.Error()
	}
	b.rep.Leftovers = b.teardown(runErr != nil)
	b.rep.DurationS = time.Since(now).Seconds()
	b.rep.Host["load_end"] = loadAvg()
	b.rep.Host["summary"] = fmt.Sprintf("%s; load average %s at the start, %s at the end", b.rep.Host["summary"], b.rep.Host["load_start"], b.rep.Host["load_end"])

	fmt.Println()
	b.rep.print(os.Stdout)
	path, err := b.rep.write(cfg.out, b.stamp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing results:", err)
		return 1
	}
	fmt.Printf("\nresults: %s (and .md), %.0f s\n", path, b.rep.DurationS)
	if len(b.rep.Leftovers) > 0 {
		fmt.Printf("LEFT BEHIND (removed by hand): %s\n", strings.Join(b.rep.Leftovers, "; "))
	}
	if runErr != nil || len(b.rep.Leftovers) > 0 {
		return 1
	}
	return 0
}

// scenarios runs what cfg selects, in an order that keeps the pool clean
// for the reclaim checks: the controller scenarios first, the node ones
// (which need a node plugin with the fuse mapper) last.
func (b *bench) scenarios(ctx context.Context) error {
	sc := b.cfg.scenarios
	left, err := b.poolContents(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("pool %s is not empty at the start (%s): the reclaim checks need a pool of their own", b.c.Pool, strings.Join(left, "; "))
	}
	if sc["P10"] {
		return b.measured(func() error { return b.runP10(ctx) })
	}
	ctrl := sc["P1"] || sc["P2"] || sc["P4"] || sc["P5"] || sc["P6"] || sc["P11"]
	if ctrl {
		sides, err := b.startSides()
		if err != nil {
			return err
		}
		if err := b.warmSides(ctx, sides); err != nil {
			return err
		}
		quiet := sides.quiet
		idle, err := b.memSnapshot(ctx, quiet, "p5_idle")
		if err != nil {
			return err
		}
		b.logf("P5 idle after the first Ceph connection: VmRSS %.1f MiB (%s)", idle.rssMiB(), memParts(idle))
		if sc["P5"] {
			if err := b.idleRow(ctx, idle, b.floor); err != nil {
				return err
			}
		}
		if sc["P1"] || sc["P2"] || sc["P6"] {
			if err := b.measured(func() error { return b.runP1(ctx, quiet, sides.verbose) }); err != nil {
				return err
			}
		}
		b.floor.stop()
		if sc["P5"] && b.cfg.cycles > 0 {
			if err := b.measured(func() error { return b.runP5(ctx, quiet) }); err != nil {
				return err
			}
		}
		if sc["P4"] {
			if err := b.measured(func() error { return b.runP4(ctx, quiet) }); err != nil {
				return err
			}
		}
		if sc["P11"] {
			if err := b.measured(func() error { return b.runP11(ctx, quiet) }); err != nil {
				return err
			}
		}
	}
	if sc["P8"] {
		if err := b.measured(func() error { return b.runP8(ctx) }); err != nil {
			return err
		}
	}
	if sc["P9"] {
		if err := b.measured(func() error { return b.runP9(ctx) }); err != nil {
			return err
		}
	}
	if sc["P3"] || sc["P7"] {
		np, err := b.startPlugin("node", "--mode", "all", "--nodeid", "bench", "--default-mounter", "fuse",
			"--state-dir", filepath.Join(b.work, "state"), "--v", "2",
			"--key-dir", filepath.Join(b.work, "keys"), "--allow-key-dir-on-disk")
		if err != nil {
			return err
		}
		if err := b.warmNode(ctx, np); err != nil {
			return fmt.Errorf("warming up the node plugin: %w", err)
		}
		if sc["P3"] {
			if err := b.measured(func() error { return b.runP3(ctx, np) }); err != nil {
				return err
			}
		}
		if sc["P7"] {
			if err := b.measured(func() error { return b.runP7(ctx, np) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// measured runs a scenario and gives the rows it adds the load average
// over its run.
func (b *bench) measured(run func() error) error {
	from, load := len(b.rep.Rows), newLoadSpan()
	err := run()
	load.sample()
	b.rep.setLoad(from, load)
	return err
}

// teardown removes everything the run made, stops the plugins and checks
// that nothing is left on the node or in the pool. It returns what it had
// to remove by other means than the plugin's own calls.
func (b *bench) teardown(failed bool) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.floor.stop()
	left := b.led.cleanup(ctx, b.c, b.raw, b.pool)
	for _, p := range b.plugins {
		if !p.alive() && !p.retired {
			left = append(left, fmt.Sprintf("plugin %s had exited: %s", p.name, p.tail(20)))
		}
		p.stop()
		// Kept next to the results for a post-mortem of odd figures (the
		// --v=5 one, megabytes, only when something failed).
		if p.name != "driver-v5" || failed {
			if data, err := os.ReadFile(p.logPath); err == nil && os.MkdirAll(b.cfg.out, 0o755) == nil {
				_ = os.WriteFile(filepath.Join(b.cfg.out, fmt.Sprintf("bench-%s-%s.log", b.stamp, p.name)), data, 0o644)
			}
		}
	}
	left = append(left, b.extraLeft...)
	for _, f := range forceCleanNode(b.work) {
		left = append(left, "node: "+f)
	}
	if rest, err := b.poolContents(ctx); err != nil {
		left = append(left, "checking the pool: "+err.Error())
	} else if len(rest) > 0 {
		left = append(left, "pool: "+strings.Join(rest, "; "))
	}
	// The plugin logs are in the results directory by now.
	if l, err := harness.FindLeftovers(b.work); b.cfg.keepWork || err != nil || !l.Empty() {
		b.logf("work directory kept: %s", b.work)
	} else {
		_ = os.RemoveAll(b.work)
	}
	return left
}
