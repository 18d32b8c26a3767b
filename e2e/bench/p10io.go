package main

// P10's load: one I/O pattern, run by rbd bench on an image through
// librbd, or by fio on a block device or through librbd, and read back
// as the tool itself measured it (its own clock, from the first I/O to
// the last, without the tool's start and its connection to the cluster).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// p10Pattern is one I/O pattern: every side runs it with the same I/O
// size, the same number of I/Os in flight and the same total.
type p10Pattern struct {
	Name  string `json:"name"`
	Write bool   `json:"write"`
	Rand  bool   `json:"random"`
	Size  int64  `json:"io_size"`
}

// The patterns, in the order each round runs them: sequential writes
// first, so that every later read finds data (a read of an object never
// written costs librbd nothing when the object map says so).
var p10Patterns = []p10Pattern{
	{Name: "1M sequential write", Write: true, Size: mib},
	{Name: "1M sequential read", Size: mib},
	{Name: "4K random write", Write: true, Rand: true, Size: 4 << 10},
	{Name: "4K random read", Rand: true, Size: 4 << 10},
}

// unit is what a row of the pattern reports: IOPS for small random I/O,
// MB/s (10^6 bytes) for large sequential I/O.
func (p p10Pattern) unit() string {
	if p.Rand {
		return "IOPS"
	}
	return "MB/s"
}

// figure is the row's figure from I/Os per second.
func (p p10Pattern) figure(iops float64) float64 {
	if p.Rand {
		return iops
	}
	return iops * float64(p.Size) / 1e6
}

// fioRW is fio's name of the pattern.
func (p p10Pattern) fioRW() string {
	rw := map[bool]string{true: "write", false: "read"}[p.Write]
	if p.Rand {
		return "rand" + rw
	}
	return rw
}

// p10Result is what one run of a tool measured.
type p10Result struct {
	IOPS    float64 `json:"iops"`
	Seconds float64 `json:"seconds"`
	// Mean and 99th percentile completion latency (fio only).
	LatMeanMs float64 `json:"lat_mean_ms,omitempty"`
	LatP99Ms  float64 `json:"lat_p99_ms,omitempty"`
}

// rbdBench runs `rbd bench` on pool/image as user, with the
// configuration conf (p10Conf: librbd's cache off). Sequential is
// full-seq: one stream with depth I/Os in flight, as fio's; rbd bench's
// seq would run depth streams, each in a chunk of its own.
func rbdBench(ctx context.Context, conf, user, pool, image string, p p10Pattern, depth int, total int64) (p10Result, string, error) {
	pattern := "full-seq"
	if p.Rand {
		pattern = "rand"
	}
	io := map[bool]string{true: "write", false: "read"}[p.Write]
	args := []string{"-c", conf, "--id", user, "bench", "--io-type", io,
		"--io-size", strconv.FormatInt(p.Size, 10), "--io-pattern", pattern, "--io-threads", strconv.Itoa(depth),
		"--io-total", strconv.FormatInt(total, 10), pool + "/" + image}
	out, err := p10Tool(ctx, "rbd", nil, args...)
	if err != nil {
		return p10Result{}, out, err
	}
	r, err := parseRBDBench(out)
	return r, out, err
}

// rbdBenchEnd is the line rbd bench ends with: "elapsed: 12   ops: 4096
// ops/sec: 341.3   bytes/sec: 1.3 MiB/s". elapsed is truncated to whole
// seconds; ops/sec is not.
var rbdBenchEnd = regexp.MustCompile(`(?m)^elapsed:\s*(\d+)\s+ops:\s*(\d+)\s+ops/sec:\s*([0-9.eE+-]+)`)

func parseRBDBench(out string) (p10Result, error) {
	m := rbdBenchEnd.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return p10Result{}, fmt.Errorf("no result line in rbd bench's output: %q", tail(out, 300))
	}
	last := m[len(m)-1]
	ops, _ := strconv.ParseFloat(last[2], 64)
	rate, err := strconv.ParseFloat(last[3], 64)
	if err != nil || rate <= 0 {
		return p10Result{}, fmt.Errorf("rbd bench: bad ops/sec %q", last[3])
	}
	return p10Result{IOPS: rate, Seconds: ops / rate}, nil
}

// fioOn runs fio's pattern on a block device with O_DIRECT and libaio,
// depth I/Os in flight, total bytes within the device's first size bytes.
// Random offsets may repeat (norandommap), as rbd bench's do.
func fioOn(ctx context.Context, device string, size int64, p p10Pattern, depth int, total int64) (p10Result, string, error) {
	return runFio(ctx, nil, p, depth, total, "--filename="+device, "--ioengine=libaio", "--direct=1",
		"--size="+strconv.FormatInt(size, 10))
}

// fioRBD runs fio's pattern through librbd (fio's rbd engine) with the
// configuration conf, as rbdBench does: the same library as rbd bench,
// driven by the device sides' load generator.
func fioRBD(ctx context.Context, conf, user, pool, image string, p p10Pattern, depth int, total int64) (p10Result, string, error) {
	return runFio(ctx, []string{"CEPH_CONF=" + conf}, p, depth, total,
		"--ioengine=rbd", "--clientname="+user, "--pool="+pool, "--rbdname="+image)
}

func runFio(ctx context.Context, env []string, p p10Pattern, depth int, total int64, target ...string) (p10Result, string, error) {
	args := append([]string{"--name=p10", "--rw=" + p.fioRW(), "--bs=" + strconv.FormatInt(p.Size, 10),
		"--iodepth=" + strconv.Itoa(depth), "--io_size=" + strconv.FormatInt(total, 10), "--norandommap",
		"--randrepeat=0", "--output-format=json"}, target...)
	out, err := p10Tool(ctx, "fio", env, args...)
	if err != nil {
		return p10Result{}, out, err
	}
	r, err := parseFio(out, p.Write)
	return r, out, err
}

// parseFio reads fio's JSON: the one job's read or write side.
func parseFio(out string, write bool) (p10Result, error) {
	// fio may print notes before the JSON.
	if i := strings.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var raw struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return p10Result{}, fmt.Errorf("fio's JSON: %w: %q", err, tail(out, 300))
	}
	if len(raw.Jobs) != 1 {
		return p10Result{}, fmt.Errorf("fio reported %d jobs, want 1", len(raw.Jobs))
	}
	var side fioSide
	key := map[bool]string{true: "write", false: "read"}[write]
	if err := json.Unmarshal(raw.Jobs[0][key], &side); err != nil {
		return p10Result{}, fmt.Errorf("fio's %s figures: %w", key, err)
	}
	var jobErr int
	_ = json.Unmarshal(raw.Jobs[0]["error"], &jobErr)
	if jobErr != 0 || side.IOPS <= 0 || side.RuntimeMs <= 0 {
		return p10Result{}, fmt.Errorf("fio: error %d, %s iops %v in %d ms", jobErr, key, side.IOPS, side.RuntimeMs)
	}
	return p10Result{IOPS: side.IOPS, Seconds: float64(side.RuntimeMs) / 1000,
		LatMeanMs: side.Clat.Mean / 1e6, LatP99Ms: side.Clat.Percentile["99.000000"] / 1e6}, nil
}

type fioSide struct {
	IOPS      float64 `json:"iops"`
	RuntimeMs int64   `json:"runtime"`
	Clat      struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// p10Tool runs a tool with extra environment, bounded, and returns its
// standard output (and error, on failure).
func p10Tool(ctx context.Context, name string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	// runs: rbd fio
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(errb.String(), 500))
	}
	return out.String(), nil
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
