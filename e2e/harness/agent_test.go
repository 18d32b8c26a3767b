package harness

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The agent on loopback: what the kernel test's joint phase relies on,
// checked where it is cheap.
func TestAgent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Must(t, err, "listen")
	stop := make(chan os.Signal, 1)
	served := make(chan error, 1)
	go func() { served <- serveAgent(l, stop) }()
	a := Agent{Addr: l.Addr().String()}
	Must(t, a.Ping(5*time.Second), "ping")

	r, err := a.Run([]string{"cat"}, []byte("through stdin"), 10*time.Second)
	if err != nil || r.Output != "through stdin" || r.Exit != 0 || r.Failed() != "" {
		t.Fatalf("cat: %+v %v", r, err)
	}
	r, err = a.Run([]string{"ls", "/nonexistent-" + t.Name()}, nil, 10*time.Second)
	if err != nil || r.Exit == 0 || r.TimedOut || !strings.Contains(r.Failed(), "exit status") {
		t.Fatalf("a failing program: %+v %v", r, err)
	}
	// No shell: the argument is a file name, not a command line.
	r, err = a.Run([]string{"ls /"}, nil, 10*time.Second)
	if err != nil || r.Exit != -1 || r.TimedOut {
		t.Fatalf("a program named %q: %+v %v", "ls /", r, err)
	}
	start := time.Now()
	r, err = a.Run([]string{"sleep", "30"}, nil, 300*time.Millisecond)
	if err != nil || !r.TimedOut || r.Failed() != "timed out" || time.Since(start) > 10*time.Second {
		t.Fatalf("a program past its timeout: %+v %v after %v", r, err, time.Since(start))
	}

	log := filepath.Join(t.TempDir(), "log")
	kept := []string{"sleep", "61.5"} // an argv no other process has
	Must(t, a.Start(kept, log), "start")
	if err := a.Start(kept, log); err == nil || !strings.Contains(err.Error(), "runs already") {
		t.Fatalf("a second start: %v", err)
	}
	if n := processesWith(t, kept); n != 1 {
		t.Fatalf("%d processes %v run, want 1", n, kept)
	}
	Must(t, a.Stop(), "stop")
	if n := processesWith(t, kept); n != 0 {
		t.Fatalf("%d processes %v run after the stop", n, kept)
	}
	Must(t, a.Start(kept, log), "start after a stop")

	left, err := a.Leftovers(t.TempDir())
	if err != nil || len(left) != 0 {
		t.Fatalf("leftovers of an empty directory: %v %v", left, err)
	}

	// The end of the agent ends what it keeps.
	stop <- os.Interrupt
	select {
	case err := <-served:
		Must(t, err, "serving")
	case <-time.After(40 * time.Second):
		t.Fatal("the agent did not end")
	}
	if n := processesWith(t, kept); n != 0 {
		t.Fatalf("%d processes %v outlive the agent", n, kept)
	}
	if a.Ping(time.Second) == nil {
		t.Fatal("the agent answers after its end")
	}
}

// processesWith counts the live processes with exactly that argv.
func processesWith(t *testing.T, argv []string) int {
	t.Helper()
	files, err := filepath.Glob("/proc/[0-9]*/cmdline")
	Must(t, err, "listing processes")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && string(b) == strings.Join(argv, "\x00")+"\x00" {
			n++
		}
	}
	return n
}
