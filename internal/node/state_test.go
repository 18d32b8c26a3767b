package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

func TestStoreRoundTrip(t *testing.T) {
	s, err := newStore(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	id := "v1:c1:rbd:csi-vol-1"
	if r, err := s.load(id); r != nil || err != nil {
		t.Fatalf("load of nothing: %v %v", r, err)
	}
	r := &record{
		VolumeID: id, Image: mapper.Image{ClusterID: "c1", Pool: "rbd", Name: "csi-vol-1"}, Mounter: "fuse",
		Device: "/dev/loop3", StagingPath: "/s", Cap: capSpec{FsType: "xfs", AccessMode: "SINGLE_NODE_WRITER"}, Staged: true,
		Targets: map[string]target{"/t": {Cap: capSpec{FsType: "xfs"}, ReadOnly: true}},
	}
	if err := s.save(r); err != nil {
		t.Fatal(err)
	}
	got, err := s.load(id)
	if err != nil || got.Device != "/dev/loop3" || !got.Targets["/t"].ReadOnly || got.Version != recordVersion {
		t.Fatalf("load: %+v %v", got, err)
	}
	if st, _ := os.Stat(s.path(id)); st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", st.Mode())
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.dir, ".tmp-*")); len(tmp) > 0 {
		t.Errorf("temp files left: %v", tmp)
	}
	if err := s.remove(id); err != nil {
		t.Fatal(err)
	}
	if err := s.remove(id); err != nil {
		t.Errorf("second remove: %v", err)
	}
}

func TestStoreRefusesBadRecords(t *testing.T) {
	s, _ := newStore(t.TempDir())
	id := "v1:c1:rbd:csi-vol-2"
	for name, content := range map[string]string{
		"corrupt":       "{not json",
		"other version": `{"version": 99, "volumeID": "v1:c1:rbd:csi-vol-2"}`,
		"other volume":  `{"version": 1, "volumeID": "v1:c1:rbd:csi-vol-3"}`,
	} {
		if err := os.WriteFile(s.path(id), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := s.load(id); err == nil {
			t.Errorf("%s record loaded: %+v", name, r)
		}
	}
	os.WriteFile(filepath.Join(s.dir, ".tmp-123"), nil, 0o600)
	s.sweepTemp()
	if tmp, _ := filepath.Glob(filepath.Join(s.dir, ".tmp-*")); len(tmp) > 0 {
		t.Errorf("sweep left %v", tmp)
	}
}
