package mapper

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

func TestFuseArgs(t *testing.T) {
	f := NewFuse(FuseOptions{Dir: "/state/fuse"}).(*fuseMapper)
	req := mapReq()
	p := f.paths(req.Image)
	if !strings.HasPrefix(p.dir, "/state/fuse/") || p.file != filepath.Join(p.dir, "mnt", "csi-vol-1") {
		t.Errorf("paths %+v", p)
	}
	other := f.paths(Image{ClusterID: "c2", Pool: "rbd", Name: "csi-vol-1"})
	if other.dir == p.dir {
		t.Errorf("two clusters share a private directory")
	}
	args := fuseArgs(p, req, "/state/keys/key-9")
	want := []string{"--conf=" + p.conf, "--id=csi-rbd", "--keyring=/state/keys/key-9", "--image=csi-vol-1", p.mnt, "-f"}
	if !slices.Equal(args, want) {
		t.Errorf("argv\n got %q\nwant %q", args, want)
	}
	for _, a := range args {
		if strings.Contains(a, testKey) {
			t.Errorf("argv holds the key: %q", a)
		}
	}
	req.Image.Namespace = "tenant-1"
	np := f.paths(req.Image)
	if np.dir == p.dir {
		t.Errorf("two namespaces share a private directory")
	}
	if args := fuseArgs(np, req, "/k"); !slices.Equal(args[3:5], []string{"--namespace=tenant-1", "--image=csi-vol-1"}) {
		t.Errorf("namespaced argv %q", args)
	}
	req.Image.Pool = "ssd"
	if args := fuseArgs(np, req, "/k"); !slices.Equal(args[3:6], []string{"--poolname=ssd", "--namespace=tenant-1", "--image=csi-vol-1"}) {
		t.Errorf("argv for another pool %q", args)
	}
	conf := fuseConf(req.MonHost, 20*time.Second)
	if !strings.Contains(conf, "mon_host = v2:10.0.0.1:3300,v2:10.0.0.2:3300\n") || !strings.Contains(conf, "client_mount_timeout = 20\n") || strings.Contains(conf, testKey) {
		t.Errorf("conf:\n%s", conf)
	}
	if got := keyring("csi-rbd", testKey); got != "[client.csi-rbd]\n\tkey = "+testKey+"\n" {
		t.Errorf("keyring %q", got)
	}
	if got := losetupAttachArgs("/x/mnt/img", true); !slices.Equal(got, []string{"--find", "--show", "--read-only", "/x/mnt/img"}) {
		t.Errorf("losetup argv %q", got)
	}
}

func TestIsFuseMount(t *testing.T) {
	info := "36 25 0:45 / /var/lib/rbdcsi/node/fuse/ab/mnt rw,nosuid,nodev,relatime shared:1 - fuse.rbd-fuse rbd-fuse rw,user_id=0,group_id=0\n" +
		"37 25 7:0 / /var/lib/kubelet/x rw,relatime - ext4 /dev/loop0 rw\n" +
		"38 25 0:46 / /with\\040space/mnt rw - fuse.rbd-fuse rbd-fuse rw\n"
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/self/mountinfo"), []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{
		"/var/lib/rbdcsi/node/fuse/ab/mnt": true,
		"/var/lib/kubelet/x":               false, // ext4, not FUSE
		"/var/lib/rbdcsi/node/fuse/cd/mnt": false,
		"/with space/mnt":                  true,
	} {
		if got := isFuseMount(root, dir); got != want {
			t.Errorf("isFuseMount(%s) = %v", dir, got)
		}
	}
	if isFuseMount(t.TempDir(), "/var/lib/rbdcsi/node/fuse/ab/mnt") {
		t.Error("a mount found without a mount table")
	}
}

func TestLoopsFor(t *testing.T) {
	root := t.TempDir()
	for dev, file := range map[string]string{"loop0": "/a/mnt/img", "loop3": "/a/mnt/img (deleted)", "loop5": "/b/mnt/img"} {
		dir := filepath.Join(root, "sys/block", dev, "loop")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "backing_file"), []byte(file+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := loopsFor(root, "/a/mnt/img"); !slices.Equal(got, []string{"/dev/loop0", "/dev/loop3"}) {
		t.Errorf("loopsFor: %v", got)
	}
	if got := backingFile(root, "/dev/loop5"); got != "/b/mnt/img" {
		t.Errorf("backingFile: %q", got)
	}
	if got := backingFile(root, "/dev/loop9"); got != "" {
		t.Errorf("backingFile of no loop: %q", got)
	}
}

func TestFindProcs(t *testing.T) {
	root := t.TempDir()
	procs := map[string][2]string{
		"100": {"rbd-fuse\x00--conf=/x\x00/s/fuse/ab/mnt\x00-f\x00", "100 (rbd-fuse) S 1"},
		"101": {"/usr/bin/rbd-fuse\x00/s/fuse/ab/mnt\x00", "101 (rbd-fuse) Z 1"},     // zombie
		"102": {"rbd-fuse\x00/s/fuse/ab/mnt2\x00", "102 (rbd-fuse) S 1"},             // other volume
		"103": {"vim\x00/s/fuse/ab/mnt\x00", "103 (vim) S 1"},                        // other program
		"104": {"/usr/bin/rbd-fuse\x00/s/fuse/ab/mnt\x00", "104 (rbd fuse) (x) R 1"}, // odd comm
	}
	for pid, p := range procs {
		dir := filepath.Join(root, "proc", pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(p[0]), 0o644)
		os.WriteFile(filepath.Join(dir, "stat"), []byte(p[1]), 0o644)
	}
	got := findProcs(root, "rbd-fuse", "/s/fuse/ab/mnt")
	slices.Sort(got)
	if !slices.Equal(got, []int{100, 104}) {
		t.Errorf("findProcs: %v, want [100 104]", got)
	}
}

func TestRedact(t *testing.T) {
	base := &command.Error{Cmd: "rbd-fuse", Stderr: "val=" + testKey + ": Malformed input", Err: ErrNotFound}
	err := redact(base, testKey)
	if strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), "<redacted>") {
		t.Errorf("redacted: %v", err)
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("redaction lost the error chain")
	}
	if redact(nil, testKey) != nil || redact(base, "") != error(base) {
		t.Errorf("redact of nil or without a secret changed something")
	}
}

func TestSqueeze(t *testing.T) {
	if got := squeeze("a\n\n  b  \n\nc\n"); got != "a; b; c" {
		t.Errorf("squeeze: %q", got)
	}
}
