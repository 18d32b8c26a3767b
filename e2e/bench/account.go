package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Evidence for where time goes: CPU seconds of each process taking part
// (plugin, this process, the Ceph daemons), how busy the machine was, and
// the Ceph operations behind each call with their mean latency, from the
// plugin's metrics (as the manifests deploy it, with --metrics-address) or,
// for the raw baseline, from the same observer hook in this process.

const clockTicks = 100 // USER_HZ, 100 on every Linux architecture we run on

// procCPU returns utime+stime of a process in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// Fields after the comm: state is [0], utime [11], stime [12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks, nil
}

// machineCPU returns busy and total CPU seconds of the whole machine.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return cpuLine(line)
}

// cpuLine reads the "cpu ..." line of /proc/stat: busy and total CPU
// seconds.
func cpuLine(line string) (busy, total float64) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy / clockTicks, total / clockTicks
}

// cpuWatch is a set of processes whose CPU use is accounted per phase.
type cpuWatch struct {
	pids map[string][]int // by process kind: ceph-osd is every OSD
}

// cephPIDs reads the daemons' PIDs that scripts/ceph-cluster.sh recorded.
func cephPIDs(dir string) map[string][]int {
	out := map[string][]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			name := "ceph-" + strings.SplitN(strings.TrimSuffix(filepath.Base(f), ".pid"), ".", 2)[0]
			out[name] = append(out[name], pid) // every OSD counts as ceph-osd
		}
	}
	return out
}

type cpuSample struct {
	at        time.Time
	procs     map[string]float64
	busy, all float64
}

func (w cpuWatch) sample() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	for name, pids := range w.pids {
		for _, pid := range pids {
			if v, err := procCPU(pid); err == nil {
				s.procs[name] += v
			}
		}
	}
	s.busy, s.all = machineCPU()
	return s
}

// cpuUse is what a phase cost in CPU: milliseconds per operation by
// process, and how busy the machine's CPUs were (1.0 = all of them).
type cpuUse struct {
	MsPerOp map[string]float64 `json:"cpu_ms_per_op"`
	Busy    float64            `json:"machine_busy"`
}

func (s cpuSample) since(before cpuSample, ops int) cpuUse {
	u := cpuUse{MsPerOp: map[string]float64{}}
	tracked := 0.0
	for name, v := range s.procs {
		if b, ok := before.procs[name]; ok {
			u.MsPerOp[name] = round2((v - b) * 1000 / float64(ops))
			tracked += v - b
		}
	}
	// Everything else the machine did meanwhile: other users of a shared
	// machine, kernel threads. Large values mean a noisy measurement.
	u.MsPerOp["others"] = round2(max(0, s.busy-before.busy-tracked) * 1000 / float64(ops))
	if d := s.all - before.all; d > 0 {
		u.Busy = round2((s.busy - before.busy) / d)
	}
	return u
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// opStats are Ceph operation counts and total seconds, by operation.
type opStats map[string][2]float64

// opUse is one operation's share of a phase: how many per call and their
// mean latency.
type opUse struct {
	PerCall float64 `json:"per_call"`
	MeanMs  float64 `json:"mean_ms"`
}

func (s opStats) since(before opStats, calls int) map[string]opUse {
	out := map[string]opUse{}
	for op, v := range s {
		n, sum := v[0]-before[op][0], v[1]-before[op][1]
		if n > 0 {
			out[op] = opUse{PerCall: round2(n / float64(calls)), MeanMs: round2(sum * 1000 / n)}
		}
	}
	return out
}

// scrapeOps reads rbdcsi_ceph_operation_duration_seconds from a plugin's
// /metrics (successes and errors together).
func scrapeOps(ctx context.Context, addr string) (opStats, error) {
	return scrapeMetrics(ctx, addr, parseOps)
}

// scrapeMetrics GETs a plugin's /metrics and parses the body.
func scrapeMetrics[T any](ctx context.Context, addr string, parse func(io.Reader) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var zero T
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return zero, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return zero, err
	}
	defer resp.Body.Close()
	return parse(resp.Body)
}

func parseOps(r io.Reader) (opStats, error) {
	out := opStats{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var idx int
		switch {
		case strings.HasPrefix(line, "rbdcsi_ceph_operation_duration_seconds_count{"):
			idx = 0
		case strings.HasPrefix(line, "rbdcsi_ceph_operation_duration_seconds_sum{"):
			idx = 1
		default:
			continue
		}
		_, rest, _ := strings.Cut(line, `operation="`)
		op, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil || op == "" {
			continue
		}
		cur := out[op]
		cur[idx] += v
		out[op] = cur
	}
	return out, sc.Err()
}

// goMem are the Go runtime's own figures from a plugin's /metrics: how
// much of the process's memory is Go's (the rest of the anonymous RSS is
// C/C++: librados, librbd and glibc's malloc arenas).
var goMemSeries = []string{
	"go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes",
	"go_memstats_sys_bytes", "go_goroutines", "go_gc_duration_seconds_count", "process_resident_memory_bytes",
}

func scrapeGoMem(ctx context.Context, addr string) (map[string]float64, error) {
	return scrapeMetrics(ctx, addr, parseGoMem)
}

func parseGoMem(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		for _, name := range goMemSeries {
			if f[0] == name {
				out[name], _ = strconv.ParseFloat(f[1], 64)
			}
		}
	}
	return out, sc.Err()
}

// mapping is one file's (or the anonymous memory's) share of the RSS.
type mapping struct {
	Name   string `json:"name"`
	RSSKiB int64  `json:"rss_kib"`
}

// rssByMapping sums /proc/<pid>/smaps Rss by file (anonymous mappings,
// heap and stacks as "[anon]"), largest first.
func rssByMapping(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sums := map[string]int64{}
	cur := "[anon]"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			// A mapping header: address perms offset dev inode [path].
			switch {
			case len(fields) >= 6 && strings.HasPrefix(fields[5], "/"):
				cur = filepath.Base(fields[5])
			case len(fields) >= 6:
				cur = fields[5] // [heap] (glibc's main arena), [stack], [vdso]
			default:
				cur = "[anon]" // Go heap and runtime, malloc arenas, thread stacks
			}
			continue
		}
		if fields[0] == "Rss:" && len(fields) >= 2 {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			sums[cur] += n
		}
	}
	var out []mapping
	for k, v := range sums {
		if v > 0 {
			out = append(out, mapping{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RSSKiB > out[j].RSSKiB })
	return out, sc.Err()
}

// rawObserver is the rbd.Observer of the raw baseline's backend.
type rawObserver struct {
	mu  sync.Mutex
	ops opStats
}

func (o *rawObserver) ObserveCephOp(op string, took time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.ops[op]
	cur[0]++
	cur[1] += took.Seconds()
	o.ops[op] = cur
}

func (o *rawObserver) snapshot() opStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := opStats{}
	for k, v := range o.ops {
		out[k] = v
	}
	return out
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// profiler runs `perf record` on a process until stopped, then keeps
// perf's own summary: the share of CPU samples by shared object and the
// hottest symbols (C, C++ and Go alike, which a Go CPU profile of the
// plugin could not show: most of its CPU is in librbd and librados).
type profiler struct {
	cmd  *exec.Cmd
	data string
}

func startPerf(pid int, data string) (*profiler, error) {
	cmd := exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(pid), "-o", data)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	return &profiler{cmd: cmd, data: data}, nil
}

// perfSummary is the top of `perf report` by shared object and by symbol.
type perfSummary struct {
	Data    string `json:"data"`
	Samples string `json:"samples"` // perf records at 499 Hz per CPU
	// Each line: share, samples, name (the counts compare across profiles).
	ByDSO    []string `json:"by_dso"`
	BySym    []string `json:"by_symbol"`
	ByThread []string `json:"by_thread"`
}

func (p *profiler) stop() (perfSummary, error) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	s := perfSummary{Data: p.data}
	report := func(sort string, n int) []string {
		out, err := exec.Command("perf", "report", "-i", p.data, "--no-children", "-n", "--sort", sort, "--stdio", "-g", "none").Output()
		if err != nil {
			return nil
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "# Samples:") && s.Samples == "" {
				s.Samples = strings.TrimPrefix(l, "# ")
			}
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if len(l) > 160 {
				l = l[:160] + "..."
			}
			lines = append(lines, strings.Join(strings.Fields(l), " "))
			if len(lines) == n {
				break
			}
		}
		return lines
	}
	s.ByDSO, s.BySym, s.ByThread = report("dso", 10), report("sym", 25), report("comm", 8)
	if len(s.ByDSO) == 0 {
		return s, fmt.Errorf("perf report of %s gave nothing", p.data)
	}
	return s, nil
}
