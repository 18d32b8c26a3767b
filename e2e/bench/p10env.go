package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cpuSnap is a machine's busy and total CPU seconds at one moment.
type cpuSnap struct{ busy, total float64 }

// cpuNow is this machine's (in the kernel VM: the guest's).
func cpuNow() cpuSnap {
	b, t := machineCPU()
	return cpuSnap{b, t}
}

// busyTo is the share of the CPUs busy from s to now.
func (s cpuSnap) busyTo(now cpuSnap) float64 {
	if now.total <= s.total {
		return 0
	}
	return (now.busy - s.busy) / (now.total - s.total)
}

// hostCPU is the host's CPU from the load file's second line (the "cpu"
// line of the host's /proc/stat, which scripts/bench-data.sh copies there
// with the load average); nil without one.
func hostCPU() *cpuSnap {
	if loadFile == "/proc/loadavg" {
		return nil
	}
	b, err := os.ReadFile(loadFile)
	if err != nil {
		return nil
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 2 {
		return nil
	}
	busy, total := cpuLine(lines[1])
	if total == 0 {
		return nil
	}
	return &cpuSnap{busy, total}
}

// queueOf reads the request queue settings of the block device at path
// (a published target: the device node itself), from sysfs.
func queueOf(path string) map[string]string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return nil
	}
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	out := map[string]string{}
	if dev, err := filepath.EvalSymlinks(dir); err == nil {
		out["device"] = filepath.Base(dev)
	}
	if name, err := os.ReadFile(filepath.Join(dir, "dm", "name")); err == nil {
		out["dm"] = strings.TrimSpace(string(name))
	}
	for _, k := range []string{"max_sectors_kb", "nr_requests", "logical_block_size", "scheduler"} {
		if b, err := os.ReadFile(filepath.Join(dir, "queue", k)); err == nil {
			out[k] = strings.TrimSpace(string(b))
		}
	}
	return out
}
