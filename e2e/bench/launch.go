package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Every side of a comparison runs under the same environment: the raw
// sides in the bench's own process, the floor, the gRPC floor and the
// plugins as processes the bench starts. A knob one side had and another
// lacked (glibc's malloc arenas, the Go runtime's GOMAXPROCS or GOGC)
// would be measured as a difference between them.

// envVar is a variable every side gets with Value; "" means unset.
type envVar struct{ Name, Value string }

// governedEnv lists the variables that change how a side runs and the
// value each side gets. MALLOC_ARENA_MAX is the plugin's own setting
// (cmd/rbdplugin/malloc.go); the others are the runtime's defaults,
// written out. Every other MALLOC_* variable is removed too.
func governedEnv(gomaxprocs int) []envVar {
	return []envVar{
		{"GOMAXPROCS", strconv.Itoa(gomaxprocs)},
		{"GOGC", "100"},
		{"GOMEMLIMIT", "off"},
		{"GODEBUG", ""},
		{"MALLOC_ARENA_MAX", "8"},
		{"GLIBC_TUNABLES", ""},
		{"LD_PRELOAD", ""},
	}
}

// isGoverned says whether the launcher sets or removes the variable.
func isGoverned(name string, gov []envVar) bool {
	return strings.HasPrefix(name, "MALLOC_") || slices.ContainsFunc(gov, func(v envVar) bool { return v.Name == name })
}

// sideEnv is base with every governed variable set to its value or
// removed.
func sideEnv(base []string, gomaxprocs int) []string {
	gov := governedEnv(gomaxprocs)
	var out []string
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !isGoverned(name, gov) {
			out = append(out, kv)
		}
	}
	for _, v := range gov {
		if v.Value != "" {
			out = append(out, v.Name+"="+v.Value)
		}
	}
	return out
}

// governedIn picks the governed variables out of an environment, the
// unset ones as "(unset)", for the results and the comparison of sides.
func governedIn(env []string, gomaxprocs int) map[string]string {
	gov := governedEnv(gomaxprocs)
	out := map[string]string{}
	for _, v := range gov {
		out[v.Name] = "(unset)"
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if isGoverned(name, gov) {
			out[name] = value
		}
	}
	return out
}

// reexecAlike restarts the bench under the sides' environment unless it
// already runs under it: the raw sides run in this process, and glibc
// reads MALLOC_ARENA_MAX, the Go runtime GOMAXPROCS and GOGC, only at
// start. It returns only if no restart is needed, or on failure.
func reexecAlike(gomaxprocs int) error {
	want := sideEnv(os.Environ(), gomaxprocs)
	if maps.Equal(governedIn(os.Environ(), gomaxprocs), governedIn(want, gomaxprocs)) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, want)
}

// proc is a process the bench started (a plugin or a floor), with its
// standard error in a log file.
type proc struct {
	name    string
	argv    []string
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
	logFile *os.File
}

// startProc runs bin under env, the same way for every process: its own
// process group (a Ctrl-C at the terminal reaches the bench, which cleans
// up through the process before stopping it), told to stop should the
// bench die, standard error (and output, unless pipes takes it) to
// dir/plugin-<name>/plugin.log. pipes, if set, takes the process's
// standard input and output before the start.
func startProc(dir, name, bin string, env, args []string, pipes func(*exec.Cmd) error) (*proc, error) {
	pdir := filepath.Join(dir, "plugin-"+name)
	if err := os.MkdirAll(pdir, 0o700); err != nil {
		return nil, err
	}
	p := &proc{name: name, argv: append([]string{bin}, args...), logPath: filepath.Join(pdir, "plugin.log")}
	lf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.logFile = lf
	// runs: bin/rbdplugin bin/rbdgrpcfloor bin/rbdfloor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stderr = lf
	if pipes != nil {
		if err := pipes(p.cmd); err != nil {
			lf.Close()
			return nil, err
		}
	}
	if p.cmd.Stdout == nil {
		p.cmd.Stdout = lf
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (SIGKILL after 30 s); safe to
// call twice.
func (p *proc) stop() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.logFile.Close()
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sideInfo is how one side was started, as /proc shows it.
type sideInfo struct {
	Name   string            `json:"name"`
	Runs   string            `json:"runs"`
	PID    int               `json:"pid"`
	Env    map[string]string `json:"env"`
	CPUs   string            `json:"cpus_allowed"`
	Nice   int               `json:"nice"`
	Cgroup string            `json:"cgroup"`
}

// sidesReport is what the results say about how the sides started.
type sidesReport struct {
	Env    map[string]string `json:"env"`
	CPUs   string            `json:"cpus_allowed"`
	Nice   int               `json:"nice"`
	Cgroup string            `json:"cgroup"`
	Sides  []sideInfo        `json:"sides"`
	WarmUp string            `json:"warm_up"`
}

// inspect reads how process pid runs: its environment as it started, the
// CPUs it may use, its nice value and its cgroup.
func inspect(pid, gomaxprocs int) (sideInfo, error) {
	s := sideInfo{PID: pid}
	// Right after exec the kernel may not have placed the new
	// environment yet, and /proc shows none: wait for it.
	var env []byte
	for try := 0; len(env) == 0; try++ {
		var err error
		if env, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil {
			return s, err
		}
		if len(env) == 0 {
			if try == 100 {
				return s, fmt.Errorf("/proc/%d/environ stays empty", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.Env = governedIn(strings.Split(strings.TrimRight(string(env), "\x00"), "\x00"), gomaxprocs)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			s.CPUs = strings.TrimSpace(v)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the comm: state is [0], nice [16].
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 16 {
			s.Nice, _ = strconv.Atoi(f[16])
		}
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return s, err
	}
	s.Cgroup = strings.Join(strings.Fields(string(cg)), " ")
	return s, nil
}

// addSide records a side and checks that it runs as the bench's own
// process does: same governed environment, CPUs, nice value and cgroup.
func (r *sidesReport) addSide(s sideInfo) error {
	r.Sides = append(r.Sides, s)
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		if s.Env[k] != r.Env[k] {
			diffs = append(diffs, fmt.Sprintf("%s=%s, not %s", k, s.Env[k], r.Env[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if _, ok := r.Env[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s=%s, unset in the bench", k, s.Env[k]))
		}
	}
	if s.CPUs != r.CPUs {
		diffs = append(diffs, fmt.Sprintf("CPUs %s, not %s", s.CPUs, r.CPUs))
	}
	if s.Nice != r.Nice {
		diffs = append(diffs, fmt.Sprintf("nice %d, not %d", s.Nice, r.Nice))
	}
	if s.Cgroup != r.Cgroup {
		diffs = append(diffs, fmt.Sprintf("cgroup %q, not %q", s.Cgroup, r.Cgroup))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("side %s (pid %d) does not run as the bench does: %s", s.Name, s.PID, strings.Join(diffs, "; "))
	}
	return nil
}

// newSidesReport starts the record with the bench's own process, where
// the raw sides run.
func newSidesReport(gomaxprocs int) (*sidesReport, error) {
	self, err := inspect(os.Getpid(), gomaxprocs)
	if err != nil {
		return nil, err
	}
	want := governedIn(sideEnv(os.Environ(), gomaxprocs), gomaxprocs)
	if !maps.Equal(self.Env, want) {
		return nil, errors.New("the bench does not run under the sides' environment (reexecAlike did not run)")
	}
	r := &sidesReport{Env: self.Env, CPUs: self.CPUs, Nice: self.Nice, Cgroup: self.Cgroup}
	self.Name, self.Runs = "raw, raw-checked", "in the bench's own process (internal/rbd/ceph)"
	r.Sides = append(r.Sides, self)
	return r, nil
}

func (r *sidesReport) print(w io.Writer) {
	var env []string
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		env = append(env, k+"="+r.Env[k])
	}
	fmt.Fprintf(w, "Every side started alike (e2e/bench/launch.go; checked in /proc/<pid> of each): %s; CPUs %s, nice %d, the bench's cgroups (in the JSON).\n",
		strings.Join(env, " "), r.CPUs, r.Nice)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| side | runs |")
	fmt.Fprintln(w, "|---|---|")
	for _, s := range r.Sides {
		fmt.Fprintf(w, "| %s | %s |\n", s.Name, s.Runs)
	}
	if r.WarmUp != "" {
		fmt.Fprintf(w, "\n%s\n", r.WarmUp)
	}
}
