package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fakeRoot(t *testing.T, controllers string, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte(controllers), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Each of kubelet's layouts and QoS classes is found; nothing else is.
func TestPodDir(t *testing.T) {
	const uid = "0b6e0d9c-3f5a-4c2e-9a1b-2c3d4e5f6a7b"
	const u = "0b6e0d9c_3f5a_4c2e_9a1b_2c3d4e5f6a7b"
	for _, dir := range []string{
		"kubepods.slice/kubepods-pod" + u + ".slice",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice",
		"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice",
		"kubepods/pod" + uid,
		"kubepods/burstable/pod" + uid,
		"kubepods/besteffort/pod" + uid,
	} {
		root := fakeRoot(t, "cpuset cpu io memory pids", dir, "kubepods/burstable/podsomeone-else")
		got, err := PodDir(root, uid)
		if err != nil || got != filepath.Join(root, dir) {
			t.Errorf("%s: found %q, %v", dir, got, err)
		}
	}
	if _, err := PodDir(fakeRoot(t, "cpu io", "kubepods/burstable/podother"), uid); !errors.Is(err, ErrNoPod) {
		t.Errorf("a pod without a cgroup: %v", err)
	}
	if _, err := PodDir(fakeRoot(t, "cpu memory", "kubepods/pod"+uid), uid); !errors.Is(err, ErrNoV2) {
		t.Errorf("a hierarchy without the io controller: %v", err)
	}
	if _, err := PodDir(t.TempDir(), uid); !errors.Is(err, ErrNoV2) {
		t.Errorf("not a cgroup v2 root: %v", err)
	}
	for _, bad := range []string{"", "../x", "a/b"} {
		if _, err := PodDir(fakeRoot(t, "io"), bad); err == nil {
			t.Errorf("pod UID %q accepted", bad)
		}
	}
}

// Every limit is written, unset ones as "max", so new limits lift old ones.
func TestSetIOMax(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "io.max")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := SetIOMax(dir, 252, 16, Limits{ReadBps: 1048576, WriteIops: 100}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	if string(got) != "252:16 rbps=1048576 wbps=max riops=max wiops=100\n" {
		t.Errorf("io.max got %q", got)
	}
	if err := SetIOMax(t.TempDir(), 1, 2, Limits{}); err == nil {
		t.Error("a cgroup without io.max accepted the limits")
	}
}
