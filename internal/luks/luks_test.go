package luks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// call is one command the fake was asked to run.
type call struct {
	argv  string // name and args, space-separated
	stdin []byte
}

// fake records commands and answers them with reply (nil: success, no output).
type fake struct {
	calls []call
	reply func(args []string) ([]byte, error)
}

func (f *fake) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return f.RunInput(ctx, nil, name, args...)
}

func (f *fake) RunInput(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, call{argv: strings.Join(append([]string{name}, args...), " "), stdin: bytes.Clone(stdin)})
	if f.reply == nil {
		return nil, nil
	}
	return f.reply(args)
}

// argv lists the commands run, in order.
func (f *fake) argv() []string {
	var out []string
	for _, c := range f.calls {
		out = append(out, c.argv)
	}
	return out
}

// keyOnlyOnStdin checks that no argument ever held key, in any common
// encoding, and that stdin carried exactly key to the commands that take
// one and nothing to the others.
func (f *fake) keyOnlyOnStdin(t *testing.T, key []byte) {
	t.Helper()
	for _, c := range f.calls {
		for _, enc := range []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key)} {
			if strings.Contains(c.argv, enc) {
				t.Errorf("the key is in the argv of %q", c.argv)
			}
		}
		sub := strings.Fields(c.argv)[1]
		if takesKey := sub == "open" || sub == "luksFormat"; takesKey != bytes.Equal(c.stdin, key) || (!takesKey && c.stdin != nil) {
			t.Errorf("%s: stdin %d bytes (key: %v)", c.argv, len(c.stdin), bytes.Equal(c.stdin, key))
		}
	}
}

// exitStatus stands for *exec.ExitError: it has ExitCode.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// failed is cryptsetup exiting with code and saying stderr, as
// command.ExecRunner reports it.
func failed(code int, stderr string) error {
	return &command.Error{Cmd: "cryptsetup", Stderr: stderr, Err: exitStatus(code)}
}

// testKey is 32 bytes with a newline and a NUL in them, which must reach
// the tool untouched.
func testKey() []byte {
	k := []byte("0123456789abcdef0123456789abcdef")
	k[5], k[9] = '\n', 0
	return k
}

const statusOutput = `/dev/mapper/%s is active and is in use.
  type:    LUKS2
  cipher:  aes-xts-plain64
  keysize: 512 bits
  key location: dm-crypt
  device:  %s
  sector size:  4096
  offset:  32768 sectors
  size:    2064384 sectors
  mode:    %s
  flags:   discards
`

func activeOn(name, device, mode string) []byte {
	return fmt.Appendf(nil, statusOutput, name, device, mode)
}

var inactive = failed(4, "/dev/mapper/x is inactive.")

func TestName(t *testing.T) {
	a, b := Name("0001-0024-pool-0000000000000001-4a5f"), Name("0001-0024-pool-0000000000000001-4a60")
	if a == b || a != Name("0001-0024-pool-0000000000000001-4a5f") {
		t.Fatalf("Name: %s, %s", a, b)
	}
	if len(a) != len(Prefix)+32 || !strings.HasPrefix(a, Prefix) || checkName(a) != nil {
		t.Fatalf("Name = %q: want %s and 32 hex digits", a, Prefix)
	}
	if got := Name(""); got != "rbdcsi-e3b0c44298fc1c149afbf4c8996fb924" {
		t.Fatalf(`Name("") = %s`, got)
	}
}

func TestFormat(t *testing.T) {
	key := testKey()
	f := &fake{reply: func(args []string) ([]byte, error) {
		if args[0] == "isLuks" {
			return nil, failed(1, "")
		}
		return nil, nil
	}}
	if err := New(Options{Runner: f}).Format(context.Background(), "/dev/rbd0", key); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cryptsetup isLuks /dev/rbd0",
		"cryptsetup luksFormat --type luks2 --batch-mode --cipher aes-xts-plain64 --key-size 512 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --hash sha256 --offset 32768 --subsystem rbdcsi --key-file - /dev/rbd0",
	}
	if got := f.argv(); !reflect.DeepEqual(got, want) {
		t.Fatalf("argv:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	f.keyOnlyOnStdin(t, key)
}

func TestFormatRefuses(t *testing.T) {
	ctx := context.Background()
	t.Run("a LUKS device", func(t *testing.T) {
		f := &fake{} // isLuks exits 0
		err := New(Options{Runner: f}).Format(ctx, "/dev/rbd0", testKey())
		if err == nil || !strings.Contains(err.Error(), "already holds a LUKS header") {
			t.Fatalf("Format = %v", err)
		}
		if got := f.argv(); !reflect.DeepEqual(got, []string{"cryptsetup isLuks /dev/rbd0"}) {
			t.Fatalf("ran %q", got)
		}
	})
	t.Run("a device it cannot read", func(t *testing.T) {
		f := &fake{reply: func([]string) ([]byte, error) {
			return nil, failed(4, "Device /dev/rbd0 does not exist or access denied.")
		}}
		err := New(Options{Runner: f}).Format(ctx, "/dev/rbd0", testKey())
		if err == nil || !strings.Contains(err.Error(), "access denied") || len(f.calls) != 1 {
			t.Fatalf("Format = %v after %q", err, f.argv())
		}
	})
	for _, tc := range []struct {
		device string
		key    []byte
		msg    string
	}{
		{"/dev/rbd0", []byte("short"), "at least 32 random bytes, not 5"},
		{"/dev/rbd0", nil, "not 0"},
		{"rbd0", testKey(), "not an absolute path"},
		{"--force", testKey(), "not an absolute path"},
	} {
		f := &fake{}
		err := New(Options{Runner: f}).Format(ctx, tc.device, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.msg) || len(f.calls) != 0 {
			t.Errorf("Format(%q, %d bytes) = %v after %q", tc.device, len(tc.key), err, f.argv())
		}
		if err != nil && len(tc.key) > 0 && strings.Contains(err.Error(), string(tc.key)) {
			t.Errorf("the key is in the error %q", err)
		}
	}
}

func TestIsLUKS(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		reply error
		want  bool
		err   string
	}{
		{nil, true, ""},
		{failed(1, ""), false, ""},
		{failed(4, "Device x does not exist or access denied."), false, "access denied"},
		{failed(-1, ""), false, "exit status -1"},
	} {
		f := &fake{reply: func([]string) ([]byte, error) { return nil, tc.reply }}
		got, err := New(Options{Runner: f}).IsLUKS(context.Background(), dev)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("reply %v: IsLUKS = %v, %v", tc.reply, got, err)
		}
		if want := []string{"cryptsetup isLuks --type luks2 " + dev}; !reflect.DeepEqual(f.argv(), want) {
			t.Errorf("argv %q, want %q", f.argv(), want)
		}
	}
	// A missing device is an error, not "not LUKS", and is not asked about.
	f := &fake{}
	if got, err := New(Options{Runner: f}).IsLUKS(context.Background(), dev+"-missing"); got || !errors.Is(err, os.ErrNotExist) || len(f.calls) != 0 {
		t.Errorf("missing device: IsLUKS = %v, %v after %q", got, err, f.argv())
	}
}

func TestOpen(t *testing.T) {
	name := Name("vol")
	for _, tc := range []struct {
		o    OpenOptions
		args string
	}{
		{OpenOptions{}, "--disable-keyring"},
		{OpenOptions{ReadOnly: true}, "--readonly --disable-keyring"},
		{OpenOptions{AllowDiscards: true}, "--allow-discards --disable-keyring"},
		{OpenOptions{ReadOnly: true, AllowDiscards: true}, "--readonly --allow-discards --disable-keyring"},
		{OpenOptions{Header: "/var/lib/rbdcsi/h/header"}, "--header /var/lib/rbdcsi/h/header --disable-keyring"},
	} {
		key := testKey()
		f := &fake{reply: func(args []string) ([]byte, error) {
			if args[0] == "status" {
				return nil, inactive
			}
			return nil, nil
		}}
		path, err := New(Options{Runner: f}).Open(context.Background(), "/dev/rbd0", name, key, tc.o)
		if err != nil || path != "/dev/mapper/"+name {
			t.Fatalf("%+v: Open = %q, %v", tc.o, path, err)
		}
		want := []string{
			"cryptsetup status " + name,
			"cryptsetup open --type luks2 --key-file - " + tc.args + " /dev/rbd0 " + name,
		}
		if got := f.argv(); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: argv:\n%s\nwant\n%s", tc.o, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		f.keyOnlyOnStdin(t, key)
	}
}

func TestOpenIsIdempotent(t *testing.T) {
	name := Name("vol")
	dir := t.TempDir()
	l := func(f *fake) *LUKS { return New(Options{Runner: f, MapperDir: dir}) }
	ctx := context.Background()

	f := &fake{reply: func([]string) ([]byte, error) { return activeOn(name, "/dev/rbd0", "read/write"), nil }}
	path, err := l(f).Open(ctx, "/dev/rbd0", name, testKey(), OpenOptions{})
	if err != nil || path != filepath.Join(dir, name) {
		t.Fatalf("Open of an open device = %q, %v", path, err)
	}
	if got := f.argv(); !reflect.DeepEqual(got, []string{"cryptsetup status " + name}) {
		t.Fatalf("ran %q: want only status", got)
	}

	f = &fake{reply: func([]string) ([]byte, error) { return activeOn(name, "/dev/rbd1", "read/write"), nil }}
	if _, err := l(f).Open(ctx, "/dev/rbd0", name, testKey(), OpenOptions{}); err == nil ||
		!strings.Contains(err.Error(), "already open on /dev/rbd1, not on /dev/rbd0") || len(f.calls) != 1 {
		t.Fatalf("Open over another device = %v after %q", err, f.argv())
	}

	f = &fake{reply: func([]string) ([]byte, error) { return activeOn(name, "/dev/rbd0", "read/write"), nil }}
	if _, err := l(f).Open(ctx, "/dev/rbd0", name, testKey(), OpenOptions{ReadOnly: true}); err == nil ||
		!strings.Contains(err.Error(), "read/write, not readonly") || len(f.calls) != 1 {
		t.Fatalf("read-only Open of a read/write device = %v after %q", err, f.argv())
	}
	f = &fake{reply: func([]string) ([]byte, error) { return activeOn(name, "/dev/rbd0", "readonly"), nil }}
	if _, err := l(f).Open(ctx, "/dev/rbd0", name, testKey(), OpenOptions{ReadOnly: true}); err != nil {
		t.Fatalf("read-only Open of a read-only device = %v", err)
	}

	// Another path to the same block device is the same device.
	blk := blockDevice(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(blk, link); err != nil {
		t.Fatal(err)
	}
	f = &fake{reply: func([]string) ([]byte, error) { return activeOn(name, blk, "read/write"), nil }}
	if _, err := l(f).Open(ctx, link, name, testKey(), OpenOptions{}); err != nil || len(f.calls) != 1 {
		t.Fatalf("Open through a symlink to %s = %v after %q", blk, err, f.argv())
	}
}

// blockDevice finds a block device node under /dev, for sameDevice.
func blockDevice(t *testing.T) string {
	t.Helper()
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		p := "/dev/" + e.Name()
		if _, ok := rdev(p); ok {
			return p
		}
	}
	t.Skip("no block device under /dev to compare device numbers with")
	return ""
}

func TestOpenWrongKey(t *testing.T) {
	name := Name("vol")
	for _, tc := range []struct {
		reply error
		wrong bool
	}{
		{failed(2, "No key available with this passphrase."), true},
		{failed(2, ""), true},
		{fmt.Errorf("wrapped: %w", failed(-1, "No key available with this passphrase.")), true},
		{failed(1, "Device /dev/rbd0 is not a valid LUKS device."), false},
		{failed(5, "Device rbdcsi-x already exists."), false},
	} {
		f := &fake{reply: func(args []string) ([]byte, error) {
			if args[0] == "status" {
				return nil, inactive
			}
			return nil, tc.reply
		}}
		_, err := New(Options{Runner: f}).Open(context.Background(), "/dev/rbd0", name, testKey(), OpenOptions{})
		if err == nil || errors.Is(err, ErrWrongKey) != tc.wrong {
			t.Errorf("reply %v: Open = %v (wrong key: %v)", tc.reply, err, errors.Is(err, ErrWrongKey))
		}
		if err != nil && strings.Contains(err.Error(), string(testKey())) {
			t.Errorf("the key is in the error %q", err)
		}
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ device, name string }{
		{"/dev/rbd0", "luks-vol"},
		{"/dev/rbd0", Prefix},
		{"/dev/rbd0", Prefix + "a/b"},
		{"/dev/rbd0", Prefix + "a b"},
		{"/dev/rbd0", Prefix + strings.Repeat("a", maxNameBytes)},
		{"rbd0", Name("v")},
	} {
		f := &fake{}
		if _, err := New(Options{Runner: f}).Open(ctx, tc.device, tc.name, testKey(), OpenOptions{}); err == nil || len(f.calls) != 0 {
			t.Errorf("Open(%q, %q) = %v after %q", tc.device, tc.name, err, f.argv())
		}
	}
	f := &fake{}
	if _, err := New(Options{Runner: f}).Open(ctx, "/dev/rbd0", Name("v"), make([]byte, 16), OpenOptions{}); err == nil || len(f.calls) != 0 {
		t.Errorf("Open with a 16-byte key = %v after %q", err, f.argv())
	}
	f = &fake{reply: func([]string) ([]byte, error) {
		return nil, failed(1, "Cannot initialize device-mapper. Is dm_mod kernel module loaded?")
	}}
	if _, err := New(Options{Runner: f}).Open(ctx, "/dev/rbd0", Name("v"), testKey(), OpenOptions{}); err == nil ||
		!strings.Contains(err.Error(), "dm_mod") || len(f.calls) != 1 {
		t.Errorf("Open without device-mapper = %v after %q", err, f.argv())
	}
}

func TestClose(t *testing.T) {
	name := Name("vol")
	for _, tc := range []struct {
		reply error
		busy  bool
		ok    bool
	}{
		{nil, false, true},
		{failed(4, "Device "+name+" is not active."), false, true},
		{failed(5, "Device "+name+" is still in use."), true, false},
		{failed(1, "Cannot initialize device-mapper."), false, false},
	} {
		f := &fake{reply: func([]string) ([]byte, error) { return nil, tc.reply }}
		err := New(Options{Runner: f}).Close(context.Background(), name)
		if (err == nil) != tc.ok || errors.Is(err, ErrBusy) != tc.busy {
			t.Errorf("reply %v: Close = %v", tc.reply, err)
		}
		if want := []string{"cryptsetup close " + name}; !reflect.DeepEqual(f.argv(), want) {
			t.Errorf("argv %q, want %q", f.argv(), want)
		}
	}
	f := &fake{}
	if err := New(Options{Runner: f}).Close(context.Background(), "vg0-root"); err == nil || len(f.calls) != 0 {
		t.Errorf("Close of another's device = %v after %q", err, f.argv())
	}
}

func TestResize(t *testing.T) {
	name := Name("vol")
	f := &fake{}
	if err := New(Options{Runner: f}).Resize(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if want := []string{"cryptsetup resize " + name}; !reflect.DeepEqual(f.argv(), want) {
		t.Errorf("argv %q, want %q", f.argv(), want)
	}
	f = &fake{reply: func([]string) ([]byte, error) { return nil, failed(4, "Device "+name+" is not active.") }}
	if err := New(Options{Runner: f}).Resize(context.Background(), name); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Errorf("Resize of a closed device = %v", err)
	}
}

func TestActive(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"control", "rbdcsi-aaa", "rbdcsi-stale", "rbdcsi-", "luks-rbdcsi-x", "vg0-root"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for n, target := range map[string]string{"rbdcsi-bbb": "../dm-1", "other": "../dm-2"} {
		if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	f := &fake{reply: func(args []string) ([]byte, error) {
		switch args[1] {
		case "rbdcsi-aaa":
			return activeOn(args[1], "/dev/rbd0", "read/write"), nil
		case "rbdcsi-bbb":
			return activeOn(args[1], "/dev/nbd3", "readonly"), nil
		}
		return nil, inactive
	}}
	got, err := New(Options{Runner: f, MapperDir: dir}).Active(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{{Name: "rbdcsi-aaa", Backing: "/dev/rbd0"}, {Name: "rbdcsi-bbb", Backing: "/dev/nbd3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Active = %+v, want %+v", got, want)
	}
	asked := f.argv()
	slices.Sort(asked)
	if want := []string{"cryptsetup status rbdcsi-aaa", "cryptsetup status rbdcsi-bbb", "cryptsetup status rbdcsi-stale"}; !reflect.DeepEqual(asked, want) {
		t.Fatalf("ran %q, want %q", asked, want)
	}

	// A failing status fails the list: a device left out would look closed.
	f = &fake{reply: func([]string) ([]byte, error) { return nil, failed(1, "Cannot initialize device-mapper.") }}
	if _, err := New(Options{Runner: f, MapperDir: dir}).Active(context.Background()); err == nil || !strings.Contains(err.Error(), "device-mapper") {
		t.Fatalf("Active with a failing status = %v", err)
	}
	f = &fake{reply: func([]string) ([]byte, error) { return []byte("/dev/mapper/x is active.\n"), nil }}
	if _, err := New(Options{Runner: f, MapperDir: dir}).Active(context.Background()); err == nil || !strings.Contains(err.Error(), "no backing device") {
		t.Fatalf("Active with a status without device = %v", err)
	}

	// No mapper directory: nothing open.
	f = &fake{}
	if got, err := New(Options{Runner: f, MapperDir: filepath.Join(dir, "none")}).Active(context.Background()); got != nil || err != nil || len(f.calls) != 0 {
		t.Fatalf("Active without a mapper dir = %v, %v after %q", got, err, f.argv())
	}
}

func TestNewDefaults(t *testing.T) {
	l := New(Options{})
	if _, ok := l.run.(command.ExecRunner); !ok || l.mapperDir != "/dev/mapper" {
		t.Fatalf("New(Options{}) = %+v", l)
	}
}
