package main

// Where the bench runs, and how busy that machine is.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// loadFile holds the load average loadAvg reads: /proc/loadavg, or in
// the kernel VM the host's, which scripts/bench-data.sh copies into a
// shared file every second (-load-file).
var loadFile = "/proc/loadavg"

// loadAvg is the 1-minute load average: how busy a shared machine was.
func loadAvg() string {
	b, err := os.ReadFile(loadFile)
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// loadNow is loadAvg as a number; -1 when it cannot be read.
func loadNow() float64 {
	v, err := strconv.ParseFloat(loadAvg(), 64)
	if err != nil {
		return -1
	}
	return v
}

// hostInfo describes where the bench runs; guestOf, if set, what the
// guest is and which host it runs on (P10).
func hostInfo(ctx context.Context, c cluster, guestOf string) map[string]any {
	cmd := func(name string, args ...string) string {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	var memKiB int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%d", &memKiB)
	}
	cephVersion := cmd("ceph", "--version")
	if f := strings.Fields(cephVersion); len(f) >= 3 {
		cephVersion = f[2]
	}
	h := map[string]any{
		"kernel": cmd("uname", "-r"), "cpus": runtime.NumCPU(), "mem_gib": float64(memKiB) / (1 << 20),
		"ceph": cephVersion, "go": runtime.Version(), "git": cmd("git", "describe", "--tags", "--always", "--dirty"),
		"cluster":    fmt.Sprintf("1 mon, %d memstore OSDs, 1 mgr on loopback (scripts/ceph-cluster.sh)", len(cephPIDs(c.Dir)["ceph-osd"])),
		"load_start": loadAvg(),
	}
	h["summary"] = fmt.Sprintf("%d CPUs, %.0f GiB, kernel %s, Ceph %s, %s, %s", h["cpus"], h["mem_gib"], h["kernel"], cephVersion, h["go"], h["git"])
	if guestOf != "" {
		h["cluster"] = fmt.Sprintf("1 mon, %d memstore OSDs, 1 mgr on the host, reached over the guest's bridge (scripts/bench-data.sh)", len(cephPIDs(c.Dir)["ceph-osd"]))
		h["guest_of"] = guestOf
		h["summary"] = fmt.Sprintf("a guest of %d vCPUs, %.1f GiB, kernel %s, Ceph %s clients, %s; %s", h["cpus"], h["mem_gib"], h["kernel"], cephVersion, h["go"], guestOf)
	}
	return h
}
