package command

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRunReturnsStdout(t *testing.T) {
	out, err := ExecRunner{}.Run(context.Background(), "printf", "%s", "hello")
	if err != nil || string(out) != "hello" {
		t.Fatalf("Run = %q, %v; want hello", out, err)
	}
}

func TestRunFailureCarriesStderrAndName(t *testing.T) {
	// Only the first two arguments name the command in the error.
	_, err := ExecRunner{}.Run(context.Background(), "sh", "-c", "echo why it failed >&2; exit 3", "sh", "third-arg")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *Error", err, err)
	}
	if ce.Cmd != "sh -c echo why it failed >&2; exit 3" || strings.Contains(err.Error(), "third-arg") || ce.Stderr != "why it failed" || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("error = %+v (%v)", ce, err)
	}
}

func TestRunTimeoutIsDeadlineExceeded(t *testing.T) {
	start := time.Now()
	_, err := ExecRunner{Timeout: 200 * time.Millisecond}.Run(context.Background(), "sleep", "30")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "after 200ms") {
		t.Fatalf("error = %v; want a deadline naming the timeout", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("a timed-out command was waited on for %s", time.Since(start))
	}
}

func TestCleanEnvDropsCephOverrides(t *testing.T) {
	t.Setenv("CEPH_ARGS", "--id admin")
	t.Setenv("CEPH_KEYRING", "/tmp/k")
	t.Setenv("LANG", "de_DE.UTF-8")
	t.Setenv("RBDCSI_KEEP", "1")
	env := strings.Join(CleanEnv(), "\n") + "\n"
	for _, gone := range []string{"CEPH_ARGS=", "CEPH_KEYRING=", "LANG="} {
		if strings.Contains(env, gone) {
			t.Errorf("CleanEnv kept %s", gone)
		}
	}
	for _, kept := range []string{"RBDCSI_KEEP=1\n", "LC_ALL=C\n"} {
		if !strings.Contains(env, kept) {
			t.Errorf("CleanEnv lacks %s", strings.TrimSpace(kept))
		}
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"  short \n", 100, "short"},
		{"0123456789", 4, "...6789"},
	} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestRunInputFeedsStdin(t *testing.T) {
	in := []byte{0, 1, 2, 'k', '\n', 255}
	out, err := ExecRunner{}.RunInput(context.Background(), in, "od", "-An", "-tu1")
	if err != nil || strings.Join(strings.Fields(string(out)), " ") != "0 1 2 107 10 255" {
		t.Fatalf("RunInput = %q, %v", out, err)
	}
	// Without input the command reads end of file at once.
	if out, err := (ExecRunner{}).Run(context.Background(), "wc", "-c"); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("Run without input = %q, %v", out, err)
	}
}

func TestRunCombinedKeepsStderr(t *testing.T) {
	out, err := ExecRunner{}.RunCombined(context.Background(), "sh", "-c", "printf out; printf err >&2")
	if err != nil || string(out) != "outerr" {
		t.Fatalf("RunCombined = %q, %v; want outerr", out, err)
	}
	if _, err := (ExecRunner{}).LookPath("sh"); err != nil {
		t.Errorf("LookPath(sh): %v", err)
	}
	if _, err := (ExecRunner{}).LookPath("no-such-tool-rbdcsi"); err == nil {
		t.Error("LookPath found a tool that does not exist")
	}
}
