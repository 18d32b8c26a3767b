package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// leftovers lists what the node still holds under dir: mount points
// (staging, targets, FUSE mounts), loop devices on files there and rbd-fuse
// processes serving a directory there. Only paths of this test binary are
// looked at, so other users of the machine do not matter.
func leftovers(dir string) []string {
	var left []string
	for _, m := range mountsUnder(dir) {
		left = append(left, "mount "+m)
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), dir+"/") {
			left = append(left, fmt.Sprintf("loop device %s on %s", filepath.Base(filepath.Dir(filepath.Dir(f))), strings.TrimSpace(string(b))))
		}
	}
	for _, pid := range rbdFuseProcs(dir) {
		left = append(left, fmt.Sprintf("rbd-fuse process %d", pid))
	}
	return left
}

// mountsUnder reads /proc/self/mountinfo for mount points at or below dir.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"cannot read mountinfo: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		if mp := f[4]; mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, fmt.Sprintf("%s (%s from %s)", mp, g[0], g[1]))
		}
	}
	return out
}

// mountSource is the device mounted at path, "" if none.
func mountSource(path string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	src := ""
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 2 && f[4] == path {
			src = g[1] // the last one is the top of the stack
		}
	}
	return src
}

// rbdFuseProcs are live (not zombie) rbd-fuse processes with an argument
// under dir.
func rbdFuseProcs(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(cmd, "\x00")), "\x00")
		if filepath.Base(argv[0]) != "rbd-fuse" || !strings.Contains(string(cmd), dir+"/") {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); err == nil && i > 0 && i+2 < len(st) && st[i+2] != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}
