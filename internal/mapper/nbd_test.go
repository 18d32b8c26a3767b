package mapper

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// nbd maps re-attachably unless the class chooses otherwise: netlink, a
// long re-attach window, no I/O timeout, and the cookie.
func TestNBDMapsForReattach(t *testing.T) {
	nbd := newCLI(NBD, CLIOptions{}, nil)
	req := mapReq()
	req.Cookie = "c00k1e"
	got := nbd.mapArgs(req, "/k")
	for _, want := range []string{"--options=try-netlink,reattach-timeout=300,io-timeout=0", "--cookie=c00k1e"} {
		if !slices.Contains(got, want) {
			t.Errorf("nbd map argv %q lacks %s", got, want)
		}
	}
	req.Options = "reattach-timeout=60,io-timeout=120,exclusive"
	if got := nbd.options(req); got != "reattach-timeout=60,io-timeout=120,exclusive,try-netlink" {
		t.Errorf("a class's own timeouts were overridden: %q", got)
	}
	if got := newCLI(KRBD, CLIOptions{}, nil).mapArgs(req, "/k"); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--cookie") }) {
		t.Errorf("krbd got a cookie: %q", got)
	}
}

// Orphaned reads the kernel's view and the daemons the plugin can see: a
// listed daemon serves the device; a kept size with no daemon listed is an
// orphan; a size of 0 is a device torn down (or never used).
func TestNBDOrphaned(t *testing.T) {
	root := t.TempDir()
	listed := `[{"id":4242,"pool":"rbd","namespace":"","image":"b","snap":"","device":"/dev/nbd3"}]`
	run := &fakeRunner{answer: func([]string) ([]byte, error) { return []byte(listed), nil }}
	nbd := newCLI(NBD, CLIOptions{SysRoot: root, Runner: run}, nil)
	dev := filepath.Join(root, "sys", "block", "nbd3")
	setSize := func(v string) {
		t.Helper()
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, "size"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, want bool) {
		t.Helper()
		got, err := nbd.Orphaned(context.Background(), "/dev/nbd3")
		if err != nil || got != want {
			t.Errorf("%s: Orphaned = %v, %v; want %v", what, got, err, want)
		}
	}
	check("no such device", false)
	setSize("2097152\n")
	check("served", false)
	listed = "[]"
	check("daemon gone, device kept", true)
	setSize("0\n")
	check("torn down", false)
	for _, bad := range []string{"/dev/rbd0", "/dev/nbd", "/dev/nbdx", "/dev/nbd1/../sda"} {
		if _, err := nbd.Orphaned(context.Background(), bad); err == nil {
			t.Errorf("Orphaned(%q) took it for an nbd device", bad)
		}
	}
	if got, err := newCLI(KRBD, CLIOptions{SysRoot: root}, nil).Orphaned(context.Background(), "/dev/nbd3"); got || err != nil {
		t.Errorf("krbd Orphaned = %v, %v", got, err)
	}
}

// Reattach hands the device, the cookie and the options to `rbd device
// attach`, the key only in a file, and cleans the key out of an error.
func TestNBDReattach(t *testing.T) {
	keys, err := PrepareKeyDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	run := &fakeRunner{answer: func(a []string) ([]byte, error) {
		argv = a
		return nil, &command.Error{Cmd: "rbd device attach", Stderr: "bad key " + testKey, Err: errors.New("exit status 22")}
	}}
	nbd := newCLI(NBD, CLIOptions{Runner: run, Keys: keys}, nil)
	req := mapReq()
	req.Cookie = "c00k1e"
	err = nbd.Reattach(context.Background(), req, "/dev/nbd3")
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("Reattach error %v: want one without the key", err)
	}
	for _, want := range []string{"attach", "--device-type=nbd", "--device=/dev/nbd3", "--cookie=c00k1e", "--id=csi-rbd",
		"--options=try-netlink,reattach-timeout=300,io-timeout=0", "--pool=rbd", "--image=csi-vol-1"} {
		if !slices.Contains(argv, want) {
			t.Errorf("attach argv %q lacks %s", argv, want)
		}
	}
	for _, a := range argv {
		if strings.Contains(a, testKey) {
			t.Errorf("attach argv holds the key: %q", a)
		}
	}
	if entries, _ := os.ReadDir(string(keys)); len(entries) != 0 {
		t.Errorf("key files left: %v", entries)
	}
	req.Cookie = ""
	if err := nbd.Reattach(context.Background(), req, "/dev/nbd3"); err == nil {
		t.Error("Reattach without a cookie went ahead")
	}
	if err := newCLI(KRBD, CLIOptions{Runner: run, Keys: keys}, nil).Reattach(context.Background(), mapReq(), "/dev/rbd0"); err == nil {
		t.Error("krbd Reattach went ahead")
	}
}
