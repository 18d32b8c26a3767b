// Package command runs external programs for the node: argv only, never a
// shell, each bounded by a timeout, with an environment that cannot
// change which Ceph identity or config a tool uses.
package command

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Runner runs one external command to completion and returns its stdout.
// A failure carries the (trimmed) stderr in the error. Tests replace it.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// InputRunner also feeds a command's standard input: the way a key
// reaches a tool without a file or an argument that `ps` would show.
type InputRunner interface {
	Runner
	RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// DefaultTimeout bounds one external command when none is set.
const DefaultTimeout = 60 * time.Second

// ExecRunner runs commands with exec, each bounded by Timeout on top of
// the caller's context.
type ExecRunner struct {
	Timeout time.Duration
	// combined: stderr follows stdout in the output (RunCombined).
	combined bool
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.RunInput(ctx, nil, name, args...)
}

// RunInput implements InputRunner; nil stdin reads as empty.
func (r ExecRunner) RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = CleanEnv()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	// A killed tool may leave a child holding its pipes; do not wait on it.
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %s)", ctx.Err(), timeout)
		}
		return stdout.Bytes(), &Error{Cmd: name + " " + firstArgs(args), Stderr: Tail(stderr.String(), 1024), Err: err}
	}
	if r.combined {
		return append(stdout.Bytes(), stderr.Bytes()...), nil
	}
	return stdout.Bytes(), nil
}

// RunCombined is Run with the command's stderr after its stdout in the
// output: for tools that print what the caller reads (their version, say)
// on stderr.
func (r ExecRunner) RunCombined(ctx context.Context, name string, args ...string) ([]byte, error) {
	r.combined = true
	return r.RunInput(ctx, nil, name, args...)
}

// LookPath finds a program in PATH, as Run finds it.
func (ExecRunner) LookPath(name string) (string, error) { return exec.LookPath(name) }

// Error is a failed command. Its message holds the command's own words,
// which is what an operator needs; secrets are never in argv, and callers
// that pass a key by file redact it from Stderr.
type Error struct {
	Cmd    string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Cmd, e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// firstArgs names the command in errors without its whole argument list.
func firstArgs(args []string) string {
	if len(args) > 2 {
		args = args[:2]
	}
	return strings.Join(args, " ")
}

// Tail trims s and keeps at most its last n bytes, marked when cut: a
// tool's last words say why it failed.
func Tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// CleanEnv is the environment for external tools: ours, minus what would
// silently change who Ceph tools authenticate as or which config they
// read, and with messages in the C locale, which callers parse.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CEPH_ARGS", "CEPH_CONF", "CEPH_KEYRING", "LC_ALL", "LANG":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
