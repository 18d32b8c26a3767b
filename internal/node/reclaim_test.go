package node

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// TrimVolume trims a real ext4 on a real loop device: the blocks of a
// deleted file go back to the file behind the loop device (the loop
// driver punches holes for discards, as krbd and nbd pass them to Ceph),
// and fstrim's count is reported.
func TestTrimVolumeFreesBlocks(t *testing.T) {
	for _, tool := range []string{"losetup", "mkfs.ext4", "fstrim", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil || os.Geteuid() != 0 {
			t.Skipf("needs root and %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "disk"), filepath.Join(dir, "staging")
	must(t, os.Mkdir(mnt, 0o700))
	f, err := os.Create(backing)
	must(t, err)
	must(t, f.Truncate(128<<20))
	must(t, f.Close())
	dev := strings.TrimSpace(run(t, "losetup", "--find", "--show", backing))
	t.Cleanup(func() { run(t, "losetup", "--detach", dev) })
	run(t, "mkfs.ext4", "-q", "-E", "nodiscard", dev)
	run(t, "mount", "-t", "ext4", dev, mnt)
	t.Cleanup(func() { run(t, "umount", mnt) })

	data := make([]byte, 32<<20)
	_, _ = rand.Read(data)
	must(t, os.WriteFile(filepath.Join(mnt, "data"), data, 0o600))
	syscall.Sync()
	before := allocated(t, backing)
	must(t, os.Remove(filepath.Join(mnt, "data")))
	syscall.Sync()

	fx := newFixture(t)
	fx.n.run = command.ExecRunner{Timeout: time.Minute}
	must(t, fx.n.store.save(&record{VolumeID: volID, StagingPath: mnt, Mounter: "krbd", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwo.String()}}))
	r, err := fx.n.TrimVolume(context.Background(), volID, mnt)
	if err != nil || r.Result != TrimOK {
		t.Fatalf("TrimVolume: %+v, %v", r, err)
	}
	after := allocated(t, backing)
	t.Logf("fstrim reported %d MiB trimmed; the loop device's file held %d MiB, then %d MiB", r.Bytes>>20, before>>20, after>>20)
	if r.Bytes < uint64(len(data)) || before-after < int64(len(data))*3/4 {
		t.Errorf("the trim gave back %d MiB of the %d MiB deleted (fstrim said %d MiB)", (before-after)>>20, len(data)>>20, r.Bytes>>20)
	}
}

// allocated is how many bytes of the file hold blocks.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

func run(t *testing.T, argv ...string) string {
	t.Helper()
	// runs: losetup mkfs.ext4 mount umount
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
	return string(out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Every volume TrimVolume cannot trim gets a status that says why, and
// no fstrim runs; a raw block volume is left alone without an error.
func TestTrimVolumeRefusals(t *testing.T) {
	f := newFixture(t)
	f.run.fstrim = func(path string) ([]byte, error) {
		t.Errorf("fstrim ran on %s", path)
		return nil, nil
	}
	rwoMode := rwo.String()
	for _, r := range []record{
		{VolumeID: "v1:c1:rbd:fuse", StagingPath: "/staging/fuse", Mounter: "fuse", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwoMode}},
		{VolumeID: "v1:c1:rbd:block", StagingPath: "/staging/block", Mounter: "krbd", Staged: true, Cap: capSpec{Block: true, AccessMode: rwoMode}},
		{VolumeID: "v1:c1:rbd:readers", StagingPath: "/staging/readers", Mounter: "krbd", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY.String()}},
		{VolumeID: "v1:c1:rbd:unfinished", StagingPath: "/staging/unfinished", Mounter: "krbd", Cap: capSpec{FsType: "ext4", AccessMode: rwoMode}},
		{VolumeID: "v1:c1:rbd:busy", StagingPath: "/staging/busy", Mounter: "krbd", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwoMode}},
	} {
		must(t, f.n.store.save(&r))
	}
	release, _ := f.n.locks.TryLock("vol/v1:c1:rbd:busy")
	defer release()
	for _, c := range []struct {
		id, path string
		code     codes.Code
		says     string
	}{
		{"", "", codes.InvalidArgument, "volume_id"},
		{"v1:c1:rbd:fuse", "relative/path", codes.InvalidArgument, "absolute"},
		{"v1:c1:rbd:never", "", codes.NotFound, "not staged"},
		{"v1:c1:rbd:unfinished", "", codes.NotFound, "not staged"},
		{"v1:c1:rbd:fuse", "/staging/other", codes.NotFound, "not staged on this node at /staging/other"},
		{"v1:c1:rbd:fuse", "/staging/fuse", codes.FailedPrecondition, "rbd-fuse"},
		{"v1:c1:rbd:readers", "", codes.FailedPrecondition, "one node alone"},
		{"v1:c1:rbd:busy", "", codes.Aborted, "in progress"},
	} {
		_, err := f.n.TrimVolume(context.Background(), c.id, c.path)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("TrimVolume(%q, %q) = %v, want %v saying %q", c.id, c.path, err, c.code, c.says)
		}
	}
	r, err := f.n.TrimVolume(context.Background(), "v1:c1:rbd:block", "/staging/block")
	if err != nil || r.Result != TrimBlock {
		t.Errorf("TrimVolume of a block volume = %+v, %v; want nothing done, no error", r, err)
	}
}
