package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// A krbd volume's limits from the publish context land in the pod's
// io.max line for its device; other mappers' do not (librbd enforces
// them), and neither does a publish without the pod's UID.
func TestCapIO(t *testing.T) {
	const uid = "5f0c11ee-8c99-0242-ac12-000200000001"
	root := t.TempDir()
	pod := filepath.Join(root, "kubepods", "burstable", "pod"+uid)
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string]string{filepath.Join(root, "cgroup.controllers"): "cpu io memory", filepath.Join(pod, "io.max"): ""} {
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixture(t)
	f.n.cgroupRoot = root
	limits := config.KernelLimits{ReadBps: 1 << 20, WriteIops: 50}.String()
	req := func(uid string) *csi.NodePublishVolumeRequest {
		return &csi.NodePublishVolumeRequest{
			PublishContext: map[string]string{config.PublishContextQoS: limits},
			VolumeContext:  map[string]string{podUIDKey: uid},
		}
	}
	ioMax := func() string {
		b, _ := os.ReadFile(filepath.Join(pod, "io.max"))
		return string(b)
	}
	// /dev/null stands in for the mapped device: character device 1:3.
	f.n.capIO(&record{VolumeID: "v", Mounter: "fuse", Device: "/dev/null"}, req(uid))
	f.n.capIO(&record{VolumeID: "v", Mounter: "krbd", Device: "/dev/null"}, req(""))
	if got := ioMax(); got != "" {
		t.Fatalf("io.max written for fuse or without a pod UID: %q", got)
	}
	f.n.capIO(&record{VolumeID: "v", Mounter: "krbd", Device: "/dev/null"}, req(uid))
	if got, want := ioMax(), "1:3 rbps=1048576 wbps=max riops=max wiops=50\n"; got != want {
		t.Fatalf("io.max %q, want %q", got, want)
	}
}
