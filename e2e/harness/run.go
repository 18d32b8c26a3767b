package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Machine is where a test runs programs and looks for what a node left
// behind: Local (the test's own) or an Agent (another kernel-test guest).
// Code that acts on a node's machine takes one, so that a node plugin on
// this machine and one on another guest go through the same steps.
type Machine interface {
	// Run runs argv (never a shell), with stdin, bounded by timeout.
	// The error is the transport's only: a program that failed is a
	// RunResult with a non-zero Exit.
	Run(argv []string, stdin []byte, timeout time.Duration) (RunResult, error)
	// Leftovers describes what is left under dirs (FindLeftovers).
	Leftovers(dirs ...string) ([]string, error)
}

// Local is the machine the test runs on.
type Local struct{}

// Run implements Machine.
func (Local) Run(argv []string, stdin []byte, timeout time.Duration) (RunResult, error) {
	return Run(argv, stdin, timeout), nil
}

// Leftovers implements Machine.
func (Local) Leftovers(dirs ...string) ([]string, error) { return LeftoversUnder(dirs...) }

// RunResult is how a program ended.
type RunResult struct {
	Output   string // standard output and error, interleaved
	Exit     int    // -1 when it did not start or was killed
	TimedOut bool   // killed at its timeout
}

// Failed describes an unsuccessful run, or is "" for a program that exited 0.
func (r RunResult) Failed() string {
	switch {
	case r.TimedOut:
		return "timed out"
	case r.Exit != 0:
		return fmt.Sprintf("exit status %d: %s", r.Exit, strings.TrimSpace(r.Output))
	}
	return ""
}

// runGrace is how long Run waits for a killed program to go before it
// answers anyway.
const runGrace = 5 * time.Second

// Run runs argv with its environment stripped of the cluster's keys
// (childEnv), bounded by timeout. A program still running at the timeout
// is killed and reported at once, even if it cannot die yet (stuck in an
// uninterruptible write to a device that does not answer): it is reaped
// whenever it ends. So a hung write fails the test instead of hanging it.
func Run(argv []string, stdin []byte, timeout time.Duration) RunResult {
	if len(argv) == 0 {
		return RunResult{Exit: -1, Output: "no program to run"}
	}
	out := &lockedBuffer{}
	// runs: mktemp install dd rmdir rm (the force detach's steps on a node's machine), cat ls sleep (agent_test.go)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(string(stdin))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return RunResult{Exit: -1, Output: err.Error()}
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return RunResult{Output: out.String(), Exit: cmd.ProcessState.ExitCode()}
	case <-time.After(timeout):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(runGrace):
	}
	return RunResult{Output: out.String(), Exit: -1, TimedOut: true}
}

// MustRun runs argv on m and fails the test unless it exits 0 within
// timeout; it returns the output.
func MustRun(t testing.TB, m Machine, stdin []byte, timeout time.Duration, argv ...string) string {
	t.Helper()
	r, err := m.Run(argv, stdin, timeout)
	Must(t, err, "running %v", argv)
	if f := r.Failed(); f != "" {
		t.Fatalf("%v: %s", argv, f)
	}
	return r.Output
}

// PluginArgv is the argv of the plugin with the given flags (plus
// --endpoint, in a directory of the test's, and --cluster-config), for a
// test that runs it with Run to see it refuse to start.
func PluginArgv(t testing.TB, c Cluster, args ...string) []string {
	t.Helper()
	dir := t.TempDir()
	return append([]string{Binary(t)}, pluginArgs(c, "unix://"+filepath.Join(dir, "csi.sock"), append(keyDirArgs(args, filepath.Join(dir, "keys")), args...))...)
}

// childEnv is this process's environment without the CEPH_ variables,
// which hold the cluster's keys: a program the tests start gets keys only
// where it asks for them, as in production.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CEPH_") {
			env = append(env, kv)
		}
	}
	return env
}

// LeftoversUnder describes what FindLeftovers finds under each of dirs,
// each thing once (kernel mappings belong to no directory).
func LeftoversUnder(dirs ...string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		l, err := FindLeftovers(d)
		if err != nil {
			return nil, err
		}
		for _, s := range l.Describe() {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}
