package harness

// The agent lets a test act on another machine: scripts/kernel-test.sh's
// joint phase runs one test on guest B that needs node-a on guest A. The
// controller suite's binary serves it on A (its TestMain, with
// $RBDCSI_E2E_AGENT_LISTEN), on A's address on the bridge of the test's own
// network namespace, which nothing else reaches. It runs programs from an
// argv, never through a shell; keeps one long-running program (node-a's
// plugin) until asked to stop it or until it ends itself; and looks for
// what a node left behind. It is a test's tool: it runs as root whatever
// it is asked, to anyone on that bridge.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

type runRequest struct {
	Argv    []string
	Stdin   []byte
	Timeout time.Duration
}

type startRequest struct {
	Argv []string
	Log  string // the file its output goes to
}

type leftoversRequest struct{ Dirs []string }

// agent is the serving side: the one program it keeps running.
type agent struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// ServeAgent serves on addr until SIGTERM or SIGINT, then stops the
// program it keeps, if any. Once it listens it writes addr to the file
// ready (unless ""), which the other guest waits for.
func ServeAgent(addr, ready string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if ready != "" {
		if err := os.WriteFile(ready, []byte(addr+"\n"), 0o644); err != nil {
			l.Close()
			return err
		}
	}
	return serveAgent(l, sig)
}

// serveAgent serves on l until something arrives on stop.
func serveAgent(l net.Listener, stop <-chan os.Signal) error {
	a := &agent{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(http.ResponseWriter, *http.Request) {})
	handle(mux, "/run", func(r runRequest) (RunResult, error) { return Run(r.Argv, r.Stdin, r.Timeout), nil })
	handle(mux, "/start", func(r startRequest) (struct{}, error) { return struct{}{}, a.start(r) })
	handle(mux, "/stop", func(struct{}) (struct{}, error) { a.stop(); return struct{}{}, nil })
	handle(mux, "/leftovers", func(r leftoversRequest) ([]string, error) { return LeftoversUnder(r.Dirs...) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-stop; _ = srv.Close() }()
	err := srv.Serve(l)
	a.stop()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handle serves POST path: a JSON request in, f's JSON answer out, or its
// error as the text of a 500.
func handle[Req, Resp any](mux *http.ServeMux, path string, f func(Req) (Resp, error)) {
	mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := f(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
}

func (a *agent) start(r startRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return errors.New("a program runs already")
	}
	if len(r.Argv) == 0 {
		return errors.New("no program to start")
	}
	log, err := os.OpenFile(r.Log, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	// runs: bin/rbdplugin (node-a's plugin in the kernel test's joint phase)
	cmd := exec.Command(r.Argv[0], r.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	log.Close() // the child has its own copy
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	a.cmd, a.done = cmd, done
	return nil
}

// stop ends the program it keeps as Plugin.Stop does: SIGTERM, SIGKILL
// after 30 s.
func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return
	}
	endProcess(a.cmd.Process, a.done, syscall.SIGTERM, 30*time.Second)
	a.cmd = nil
}

// Agent is the client of an agent at Addr (host:port): the machine it
// runs on.
type Agent struct{ Addr string }

// agentSlack is what a call may take beyond the work it asks for.
const agentSlack = 30 * time.Second

func (a Agent) call(path string, req, resp any, timeout time.Duration) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := client(timeout).Post("http://"+a.Addr+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(r.Body)
		return fmt.Errorf("agent %s%s: %s: %s", a.Addr, path, r.Status, bytes.TrimSpace(msg))
	}
	return json.NewDecoder(r.Body).Decode(resp)
}

// client makes each call on a connection of its own: one kept from before
// an outage of the link may be gone at the agent's end.
func client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
}

// Run implements Machine.
func (a Agent) Run(argv []string, stdin []byte, timeout time.Duration) (RunResult, error) {
	var r RunResult
	err := a.call("/run", runRequest{Argv: argv, Stdin: stdin, Timeout: timeout}, &r, timeout+runGrace+agentSlack)
	return r, err
}

// Leftovers implements Machine.
func (a Agent) Leftovers(dirs ...string) ([]string, error) {
	var left []string
	err := a.call("/leftovers", leftoversRequest{Dirs: dirs}, &left, agentSlack)
	return left, err
}

// Start starts the one program the agent keeps, its output going to the
// file log on the agent's machine.
func (a Agent) Start(argv []string, log string) error {
	return a.call("/start", startRequest{Argv: argv, Log: log}, &struct{}{}, agentSlack)
}

// Stop stops it (SIGTERM, SIGKILL after 30 s); without one it does nothing.
func (a Agent) Stop() error {
	return a.call("/stop", struct{}{}, &struct{}{}, 30*time.Second+agentSlack)
}

// Ping tells whether the agent answers within timeout.
func (a Agent) Ping(timeout time.Duration) error {
	r, err := client(timeout).Get("http://" + a.Addr + "/ping")
	if err != nil {
		return err
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("agent %s: %s", a.Addr, r.Status)
	}
	return nil
}
