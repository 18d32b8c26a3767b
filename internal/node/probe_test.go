package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// fakeTools has the programs in have, and answers RunCombined with out.
type fakeTools struct {
	have map[string]bool
	out  string
	err  error
	ran  []string
}

func (f *fakeTools) LookPath(name string) (string, error) {
	if f.have[name] {
		return "/usr/sbin/" + name, nil
	}
	return "", errors.New("not found")
}

func (f *fakeTools) RunCombined(_ context.Context, name string, args ...string) ([]byte, error) {
	f.ran = append(f.ran, name+" "+strings.Join(args, " "))
	return []byte(f.out), f.err
}

func TestToolsPresent(t *testing.T) {
	all := map[string]bool{}
	for _, n := range []string{"mount", "umount", "blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "dumpe2fs", "e2fsck", "xfs_growfs", "rbd", "rbd-nbd"} {
		all[n] = true
	}
	if err := ToolsPresent(&fakeTools{have: all}, mapper.NBD); err != nil {
		t.Errorf("nbd with its tools: %v", err)
	}
	err := ToolsPresent(&fakeTools{have: all}, mapper.Fuse)
	if err == nil || !strings.Contains(err.Error(), "rbd-fuse, losetup") {
		t.Errorf("fuse without rbd-fuse and losetup: %v", err)
	}
	delete(all, "blkid")
	if err := ToolsPresent(&fakeTools{have: all}, mapper.KRBD); err == nil || !strings.Contains(err.Error(), "blkid") {
		t.Errorf("krbd without blkid: %v", err)
	}
}

func TestMkfsPrezeroed(t *testing.T) {
	for _, tc := range []struct {
		out  string
		err  error
		want bool
	}{
		{"mke2fs 1.47.0 (5-Feb-2023)\n\tUsing EXT2FS Library version 1.47.0\n", nil, true},
		{"mke2fs 1.46.5 (30-Dec-2021)\n", nil, false},
		{"", errors.New("mke2fs: not found"), false},
	} {
		tools := &fakeTools{out: tc.out, err: tc.err}
		if got := MkfsPrezeroed(context.Background(), tools); got != tc.want {
			t.Errorf("MkfsPrezeroed with %q, %v = %v", tc.out, tc.err, got)
		}
		if len(tools.ran) != 1 || tools.ran[0] != "mke2fs -V" {
			t.Errorf("ran %v, want mke2fs -V", tools.ran)
		}
	}
}

func TestStateDirWritable(t *testing.T) {
	dir := t.TempDir()
	if err := StateDirWritable(dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the probe left %v", left)
	}
	if err := StateDirWritable(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory is writable")
	}
}
