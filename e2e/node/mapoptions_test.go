package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestMapOptions stages a volume whose StorageClass gives per-mapper map
// options and finds each of the volume's mapper in the mapping itself: in
// the kernel's view of a krbd device (config_info), or on the command line
// of the rbd-nbd process serving an nbd device.
func TestMapOptions(t *testing.T) {
	want := map[string][]string{
		"krbd": {"queue_depth=128", "lock_on_read", "alloc_size=131072"},
		"nbd":  {"--io-timeout", "45", "--try-netlink"},
	}[mounter()]
	if want == nil {
		t.Skipf("the %s mounter takes no map options", mounter())
	}
	e := setup(t)
	c := blockCap(singleWriter)
	// lock_on_read needs the exclusive-lock feature (the kernel refuses it
	// without; CreateVolume checks that).
	v := e.createVolume("map-options", 16*mib, c, "imageFeatures", "layering,exclusive-lock",
		"mapOptions", "krbd:queue_depth=128,lock_on_read,alloc_size=131072;nbd:io-timeout=45,try-netlink")
	staging := e.path("staging")
	e.stage(v, staging, c)

	var got string
	switch mounter() {
	case "krbd":
		infos, _ := filepath.Glob("/sys/bus/rbd/devices/*/config_info")
		if len(infos) != 1 {
			t.Fatalf("krbd devices: %v, want one", infos)
		}
		b, err := os.ReadFile(infos[0])
		harness.Must(t, err, "read %s", infos[0])
		got = string(b)
	case "nbd":
		pids, _ := filepath.Glob("/sys/block/nbd*/pid")
		if len(pids) != 1 {
			t.Fatalf("connected nbd devices: %v, want one", pids)
		}
		pid, err := os.ReadFile(pids[0])
		harness.Must(t, err, "read %s", pids[0])
		b, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "cmdline"))
		harness.Must(t, err, "rbd-nbd's command line")
		got = strings.ReplaceAll(string(b), "\x00", " ")
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s mapping %q lacks %q", mounter(), got, w)
		}
	}
}

// TestReadAffinity: a node plugin with a CRUSH location (from its labels,
// here --node-labels) maps krbd volumes reading from the nearest replica,
// as the kernel's view of the mapping shows; a StorageClass that chooses
// read_from_replica itself keeps its choice. rbd-nbd takes read affinity
// as configuration: its own admin socket shows the policy and location.
func TestReadAffinity(t *testing.T) {
	switch mounter() {
	case "nbd":
		testNBDReadAffinity(t)
		return
	case "krbd":
	default:
		t.Skipf("read affinity is a krbd and nbd matter; the %s mounter does not read from replicas (docs/reference.md#flags, --crush-location-labels)", mounter())
	}
	e := setup(t, crushLabels...)
	c := blockCap(singleWriter)
	for _, tc := range []struct {
		name, mapOptions string
		want, not        []string
	}{
		{"affinity", "", []string{"read_from_replica=localize", "crush_location=hostname:node-1|zone:zone-a"}, nil},
		{"affinity-own", "krbd:read_from_replica=balance", []string{"read_from_replica=balance"}, []string{"zone-a"}},
	} {
		var params []string
		if tc.mapOptions != "" {
			params = []string{"mapOptions", tc.mapOptions}
		}
		v := e.createVolume(tc.name, 16*mib, c, params...)
		staging := e.path(tc.name)
		e.stage(v, staging, c)
		infos, _ := filepath.Glob("/sys/bus/rbd/devices/*/config_info")
		if len(infos) != 1 {
			t.Fatalf("krbd devices: %v, want one", infos)
		}
		b, err := os.ReadFile(infos[0])
		harness.Must(t, err, "read %s", infos[0])
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: mapping %q lacks %q", tc.name, b, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(string(b), n) {
				t.Errorf("%s: mapping %q has %q", tc.name, b, n)
			}
		}
		e.unstage(v, staging)
	}
}

// crushLabels give the node plugin a CRUSH location.
var crushLabels = []string{"--crush-location-labels", "topology.kubernetes.io/zone,kubernetes.io/hostname",
	"--node-labels", "topology.kubernetes.io/zone=zone-a,kubernetes.io/hostname=node-1"}

// testNBDReadAffinity asks the rbd-nbd serving a staged volume, through
// its admin socket, which read policy and CRUSH location it runs with.
// Ceph's clients put the socket in /var/run/ceph (run_dir), which the
// test makes where missing (in the kernel-test guest, /var is a tmpfs).
func testNBDReadAffinity(t *testing.T) {
	if _, err := os.Stat("/var/run/ceph"); os.IsNotExist(err) {
		harness.Must(t, os.Mkdir("/var/run/ceph", 0o755), "mkdir /var/run/ceph")
		t.Cleanup(func() { _ = os.Remove("/var/run/ceph") })
	}
	e := setup(t, crushLabels...)
	c := blockCap(singleWriter)
	v := e.createVolume("affinity", 16*mib, c)
	staging := e.path("affinity")
	e.stage(v, staging, c)
	defer e.unstage(v, staging)
	pids, _ := filepath.Glob("/sys/block/nbd*/pid")
	if len(pids) != 1 {
		t.Fatalf("connected nbd devices: %v, want one", pids)
	}
	pid, err := os.ReadFile(pids[0])
	harness.Must(t, err, "read %s", pids[0])
	socks, _ := filepath.Glob("/var/run/ceph/*." + strings.TrimSpace(string(pid)) + ".*asok")
	if len(socks) != 1 {
		t.Fatalf("admin sockets of rbd-nbd %s: %v, want one", strings.TrimSpace(string(pid)), socks)
	}
	for key, want := range map[string]string{"rbd_read_from_replica_policy": "localize", "crush_location": "hostname=node-1 zone=zone-a"} {
		out, err := exec.Command("ceph", "--admin-daemon", socks[0], "config", "get", key).CombinedOutput()
		harness.Must(t, err, "config get %s: %s", key, out)
		if !strings.Contains(string(out), `"`+want+`"`) {
			t.Errorf("rbd-nbd runs with %s", out)
		}
	}
}

// TestUnmapOptions: a StorageClass's unmapOptions reach `rbd device unmap`.
// With krbd:force the unstage unmaps a device something still holds open
// (the kernel's forced unmap); without it the same unstage fails busy,
// keeps the mapping, and unmaps once the holder is gone.
func TestUnmapOptions(t *testing.T) {
	if mounter() != "krbd" {
		t.Skipf("unmap options are krbd's (force, udev); the %s mounter takes none", mounter())
	}
	e := setup(t)
	c := mountCap("ext4", singleWriter)
	for _, force := range []bool{false, true} {
		name := fmt.Sprintf("unmap-force-%v", force)
		var params []string
		if force {
			params = []string{"unmapOptions", "krbd:force"}
		}
		v := e.createVolume(name, 16*mib, c, params...)
		staging := e.path(name)
		e.stage(v, staging, c)
		dev := mountSource(staging)
		holder, err := os.Open(dev)
		harness.Must(t, err, "open %s", dev)
		_, err = e.nc.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging})
		mapped, _ := filepath.Glob("/sys/bus/rbd/devices/*")
		holder.Close()
		switch {
		case force && (err != nil || len(mapped) != 0):
			t.Errorf("unstage with unmapOptions krbd:force of a device held open: %v; mapped %v", err, mapped)
		case !force && (err == nil || len(mapped) != 1):
			t.Errorf("unstage without force of a device held open: %v, mapped %v; want it refused, the mapping kept", err, mapped)
		default:
			t.Logf("force %v: %v", force, err)
		}
		e.unstage(v, staging) // the holder gone: done, or unmapped now
		if mapped, _ := filepath.Glob("/sys/bus/rbd/devices/*"); len(mapped) != 0 {
			t.Errorf("mapped after the unstage: %v", mapped)
		}
	}
}
