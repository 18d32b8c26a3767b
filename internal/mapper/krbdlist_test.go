package mapper

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// krbdDevice lays out the sysfs directory the kernel makes for a mapping;
// an empty ns leaves pool_ns out, as kernels before 4.19 do.
func krbdDevice(t *testing.T, root, id, pool, ns, name, snap string) {
	t.Helper()
	dir := filepath.Join(root, krbdDevices, id)
	attrs := map[string]string{"pool": pool, "name": name, "current_snap": snap, "size": "67108864"}
	if ns != "" {
		attrs["pool_ns"] = ns
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListKRBD(t *testing.T) {
	root := t.TempDir()
	if list, err := listKRBD(root); err != nil || len(list) != 0 {
		t.Fatalf("no rbd module: %v %v, want nothing", list, err)
	}
	krbdDevice(t, root, "0", "rbd", "", "csi-vol-a", "-")
	krbdDevice(t, root, "3", "rbd-ec", "tenant-1", "csi-vol-b", "-")
	// Linux 5.0 and later name the kernel client.
	if err := os.WriteFile(filepath.Join(root, krbdDevices, "3", "client_addr"), []byte("10.0.0.5:0/2216461344\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	krbdDevice(t, root, "4", "rbd", "", "csi-vol-a", "snap-1") // a snapshot mapping: not ours
	// Half gone: the device was unmapped while listed.
	if err := os.MkdirAll(filepath.Join(root, krbdDevices, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, krbdDevices, "bus-attr"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := listKRBD(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapped{
		{Image: Image{Pool: "rbd", Name: "csi-vol-a"}, Device: "/dev/rbd0"},
		{Image: Image{Pool: "rbd-ec", Namespace: "tenant-1", Name: "csi-vol-b"}, Device: "/dev/rbd3", ClientAddr: "10.0.0.5:0/2216461344"},
	}
	if !slices.Equal(list, want) {
		t.Errorf("listKRBD:\n got %+v\nwant %+v", list, want)
	}
}
