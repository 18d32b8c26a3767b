package mapper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Runner runs one external command to completion and returns its stdout.
// A failure carries the (trimmed) stderr in the error. Tests replace it.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands with exec, never through a shell, each bounded
// by Timeout on top of the caller's context.
type ExecRunner struct {
	Timeout time.Duration
}

// DefaultCommandTimeout bounds one external command when none is set.
const DefaultCommandTimeout = 60 * time.Second

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = CleanEnv()
	// A killed tool may leave a child holding its pipes; do not wait on it.
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %s)", ctx.Err(), timeout)
		}
		return stdout.Bytes(), &CmdError{Cmd: name + " " + firstArgs(args), Stderr: tail(stderr.String(), 1024), Err: err}
	}
	return stdout.Bytes(), nil
}

// CmdError is a failed command. Its message holds the command's own words,
// which is what an operator needs; secrets never are in argv, and
// callers redact the key from Stderr before it leaves the mapper.
type CmdError struct {
	Cmd    string
	Stderr string
	Err    error
}

func (e *CmdError) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Cmd, e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *CmdError) Unwrap() error { return e.Err }

// firstArgs names the command in errors without its whole argument list.
func firstArgs(args []string) string {
	if len(args) > 2 {
		args = args[:2]
	}
	return strings.Join(args, " ")
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// CleanEnv is the environment for Ceph tools: ours, minus what would
// silently change who they authenticate as or which config they read.
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

// redact replaces the secret in an error message. Ceph tools echo a key
// they cannot parse ("error setting modifier ... val=<key>"), so any
// output that may have seen one goes through here.
func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), secret, "<redacted>"), err: err}
}

// redacted keeps errors.Is working on the original chain while printing
// only the cleaned message.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Is(target error) bool {
	return errors.Is(r.err, target)
}

// KeyDir holds the short-lived key files. It is private (0700) and, since
// a crash can leave a file behind, swept at start.
type KeyDir string

// PrepareKeyDir creates dir (0700) and removes any key file an earlier run
// left there.
func PrepareKeyDir(dir string) (KeyDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "key-*"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	return KeyDir(dir), nil
}

// write stores content in a new 0600 file and returns its path and a
// function that removes it.
func (d KeyDir) write(content string) (string, func(), error) {
	if d == "" {
		return "", nil, errors.New("no key directory configured")
	}
	f, err := os.CreateTemp(string(d), "key-*") // CreateTemp makes it 0600
	if err != nil {
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	remove := func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		remove()
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	if err := f.Close(); err != nil {
		remove()
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	return f.Name(), remove, nil
}

// keyring is the keyring file format, for tools that take --keyring.
func keyring(id, key string) string {
	return fmt.Sprintf("[client.%s]\n\tkey = %s\n", id, key)
}
