package node

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

type trimLog struct{ results []string }

func (l *trimLog) Trimmed(result string, bytes uint64) { l.results = append(l.results, result) }

// TrimAll trims the staged filesystems this node alone writes, one by one
// under each volume's lock, and tells trimmed bytes, mappers without
// discard and busy volumes apart.
func TestTrimAll(t *testing.T) {
	f := newFixture(t)
	rwo := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER.String()
	for _, r := range []record{
		{VolumeID: "v1:c1:rbd:trimmed", StagingPath: "/staging/trimmed", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:nodiscard", StagingPath: "/staging/nodiscard", Mounter: "krbd", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:fuse", StagingPath: "/staging/fuse", Mounter: "fuse", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:busy", StagingPath: "/staging/busy", Staged: true, Cap: capSpec{FsType: "xfs", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:failing", StagingPath: "/staging/failing", Staged: true, Cap: capSpec{FsType: "xfs", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:block", StagingPath: "/staging/block", Staged: true, Cap: capSpec{Block: true, AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:unfinished", StagingPath: "/staging/unfinished", Cap: capSpec{FsType: "ext4", AccessMode: rwo}},
		{VolumeID: "v1:c1:rbd:readers", StagingPath: "/staging/readers", Staged: true, Cap: capSpec{FsType: "ext4", AccessMode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY.String()}},
	} {
		if err := f.n.store.save(&r); err != nil {
			t.Fatal(err)
		}
	}
	f.run.fstrim = func(path string) ([]byte, error) {
		switch path {
		case "/staging/trimmed":
			return []byte("/staging/trimmed: 30 MiB (31457280 bytes) trimmed\n"), nil
		case "/staging/nodiscard":
			return nil, &command.Error{Cmd: "fstrim --verbose", Stderr: "fstrim: /staging/nodiscard: the discard operation is not supported", Err: errors.New("exit status 1")}
		case "/staging/fuse":
			t.Error("fstrim ran on a fuse-mapped volume, whose discards never reach Ceph")
		}
		return nil, &command.Error{Cmd: "fstrim --verbose", Stderr: "fstrim: cannot open", Err: errors.New("exit status 64")}
	}
	release, _ := f.n.locks.TryLock("vol/v1:c1:rbd:busy")
	log := &trimLog{}
	results := f.n.TrimAll(context.Background(), log)
	release()

	got := map[string]TrimResult{}
	for _, r := range results {
		got[r.VolumeID] = r
	}
	want := map[string]string{"v1:c1:rbd:trimmed": TrimOK, "v1:c1:rbd:nodiscard": TrimUnsupported, "v1:c1:rbd:fuse": TrimUnsupported, "v1:c1:rbd:busy": TrimBusy, "v1:c1:rbd:failing": TrimError}
	if len(got) != len(want) {
		t.Errorf("trimmed %v, want exactly %v", got, want)
	}
	for id, result := range want {
		if got[id].Result != result {
			t.Errorf("%s: %+v, want %s", id, got[id], result)
		}
	}
	if got["v1:c1:rbd:trimmed"].Bytes != 31457280 || got["v1:c1:rbd:failing"].Err == nil {
		t.Errorf("bytes or error not reported: %+v", got)
	}
	slices.Sort(log.results)
	if !slices.Equal(log.results, []string{TrimBusy, TrimError, TrimOK, TrimUnsupported, TrimUnsupported}) {
		t.Errorf("observer told %v", log.results)
	}
	for _, c := range f.run.calls {
		if c[0] == "fstrim" && !slices.Equal(c[1:3], []string{"--verbose", "--"}) {
			t.Errorf("fstrim called as %v", c)
		}
	}
}
