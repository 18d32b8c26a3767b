package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Outages on demand: daemons stopped, links down.

// PauseMonitor makes the monitor unreachable until the returned function
// resumes it; the test's cleanup resumes it in any case. On the machine
// that runs the cluster the monitor is stopped (SIGSTOP). In the
// kernel-test guest the monitor runs on the host, so the guest's link
// ($RBDCSI_E2E_LINK) goes down instead, as a node sees a network outage.
func PauseMonitor(t testing.TB, c Cluster) (resume func()) {
	t.Helper()
	if link := os.Getenv("RBDCSI_E2E_LINK"); link != "" {
		return cutLink(t, link)
	}
	return pause(t, daemonPIDs(t, c, "ceph-mon"))
}

// PauseOSDs stops (SIGSTOP) every OSD of the cluster until the returned
// function resumes them; the test's cleanup resumes them in any case. Ops
// in flight then wait until they time out.
func PauseOSDs(t testing.TB, c Cluster) (resume func()) {
	t.Helper()
	return pause(t, daemonPIDs(t, c, "ceph-osd"))
}

func pause(t testing.TB, pids []int) (resume func()) {
	t.Helper()
	resume = UndoOnce(t, func() {
		for _, pid := range pids {
			Must(t, syscall.Kill(pid, syscall.SIGCONT), "SIGCONT %d", pid)
		}
	})
	for _, pid := range pids {
		Must(t, syscall.Kill(pid, syscall.SIGSTOP), "SIGSTOP %d", pid)
		// The signal is delivered asynchronously: wait until it is stopped.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			Must(t, err, "status of %d", pid)
			if strings.Contains(string(st), "State:\tT") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d did not stop", pid)
			}
		}
	}
	return resume
}

// daemonPIDs finds the cluster's daemons of one kind by their command
// lines, which name the cluster's configuration file. The PID that scripts/ceph-cluster.sh
// recorded holds only in its own PID namespace: the Ceph matrix runs a
// cluster in a chroot with a PID namespace of its own and the tests outside.
func daemonPIDs(t testing.TB, c Cluster, program string) []int {
	t.Helper()
	var pids []int
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	Must(t, err, "listing processes")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(argv[0]) == program && slices.Contains(argv, c.Conf) {
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			Must(t, err, "pid of %s", f)
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no %s with -c %s runs", program, c.Conf)
	}
	return pids
}

// cutLink takes the network interface down until resume.
func cutLink(t testing.TB, link string) (resume func()) {
	t.Helper()
	setLink := func(state string) {
		out, err := exec.Command("ip", "link", "set", link, state).CombinedOutput()
		Must(t, err, "ip link set %s %s: %s", link, state, out)
	}
	setLink("down")
	return UndoOnce(t, func() { setLink("up") })
}

// UndoOnce returns undo run at most once: by the caller, or else by the
// test's cleanup.
func UndoOnce(t testing.TB, undo func()) func() {
	done := false
	once := func() {
		if !done {
			done = true
			undo()
		}
	}
	t.Cleanup(once)
	return once
}

// PauseSite stops (SIGSTOP) every daemon of the cluster, its rbd-mirror
// included, as a site cut off from its peers is, until the returned
// function resumes them (the monitor first); the test's cleanup resumes
// them in any case. Memory-backed OSDs keep their data through it, as
// they would not through a restart.
//
// Once resumed, the site's OSDs are marked down, as those of a site cut
// off longer than the heartbeat grace are, and they come back up at once
// and peer. Without, a PG whose read lease ran out while its OSD was
// stopped is "laggy" until the lease is renewed, and with no peer OSD to
// renew it with, a single OSD can leave it so for good, every op on it
// waiting (ceph/ceph-container#1682; seen here on Pacific).
func PauseSite(t testing.TB, c Cluster) (resume func()) {
	t.Helper()
	var pids []int
	for _, program := range []string{"ceph-mon", "ceph-osd", "ceph-mgr", "rbd-mirror"} {
		pids = append(pids, daemonPIDs(t, c, program)...)
	}
	cont := pause(t, pids)
	return UndoOnce(t, func() {
		cont()
		repeer(t, c)
	})
}

// repeer marks the cluster's OSDs down and waits until they are up again,
// in a later map, and every PG is active+clean.
func repeer(t testing.TB, c Cluster) {
	t.Helper()
	type osdStat struct {
		Epoch int `json:"epoch"`
		OSDs  int `json:"num_osds"`
		Up    int `json:"num_up_osds"`
	}
	stat := func() (osdStat, error) {
		var st osdStat
		out, err := c.Ceph("osd", "stat", "--format", "json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &st)
		}
		return st, err
	}
	before, err := stat()
	Must(t, err, "ceph osd stat")
	out, err := c.Ceph("osd", "down", "all")
	Must(t, err, "ceph osd down all: %s", out)
	start := time.Now()
	for deadline := start.Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		last := ""
		// Marked down, then up: two maps later at least.
		if st, err := stat(); err != nil || st.Epoch < before.Epoch+2 || st.Up != st.OSDs {
			last = fmt.Sprintf("osd stat %+v (%v)", st, err)
		} else if pgs, err := c.Ceph("pg", "stat"); err != nil || !allActiveClean(pgs) {
			last = fmt.Sprintf("pg stat %s (%v)", strings.TrimSpace(pgs), err)
		} else {
			t.Logf("the site's OSDs up and its PGs active+clean %.1f s after the resume", time.Since(start).Seconds())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the site's OSDs and PGs not back 90 s after the resume: %s", last)
		}
	}
}

// allActiveClean reads `ceph pg stat`: "8 pgs: 8 active+clean; ...".
func allActiveClean(pgStat string) bool {
	n, rest, ok := strings.Cut(strings.TrimSpace(pgStat), " pgs: ")
	return ok && strings.HasPrefix(rest, n+" active+clean;")
}
