package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestNBDReattachAfterDaemonDied: the node plugin's container dies, and
// rbd-nbd with it, under a mounted, written volume (here: the plugin and
// the volume's rbd-nbd are SIGKILLed). The kernel keeps the device; the
// restarted plugin, at kubelet's republish, which carries no secret (the
// classes name none), re-attaches a new rbd-nbd to the same device as the
// node's own user: the data written before is intact, and new writes reach
// Ceph (an I/O error while the daemon was gone would have remounted the
// ext4 read-only and failed them). (A node plugin without a user of its
// own refuses, saying how to get one: internal/node's heal tests.)
func TestNBDReattachAfterDaemonDied(t *testing.T) {
	if mounter() != "nbd" {
		t.Skipf("only rbd-nbd is a daemon that can die under a mapping; the %s mounter's mapping lives on its own", mounter())
	}
	e := setup(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("node-nbd-heal", 64*mib, c)
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	before := writeRandom(t, filepath.Join(target, "before"), 2*mib)
	dev := mountSource(staging)
	pid := nbdPid(t, dev)

	e.p.Kill()
	harness.Must(t, syscall.Kill(pid, syscall.SIGKILL), "killing rbd-nbd %d", pid)
	waitFor(t, "rbd-nbd to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	if nbdListed(t, dev) {
		t.Fatalf("rbd device list still shows %s after rbd-nbd %d was killed", dev, pid)
	}
	e.p.Start()

	republish := e.publishReq(v, staging, target, c, false)
	_, err := e.nc.NodePublishVolume(ctx(t), republish)
	harness.Must(t, err, "republish, without a secret, as the node's own user")
	if got := mountSource(staging); got != dev {
		t.Errorf("staging mount on %s after the re-attach, was %s", got, dev)
	}
	// (The kernel's pid attribute keeps the killed daemon's pid across a
	// re-attach: only the list tells.)
	if !nbdListed(t, dev) {
		t.Errorf("no rbd-nbd serves %s after the re-attach", dev)
	}
	harness.Must(t, dropCaches(), "drop caches")
	if got := fileSum(t, filepath.Join(target, "before")); got != before {
		t.Errorf("data written before the daemon died: %s, wrote %s", got, before)
	}
	after := writeRandom(t, filepath.Join(target, "after"), 2*mib)
	harness.Must(t, dropCaches(), "drop caches")
	if got := fileSum(t, filepath.Join(target, "after")); got != after {
		t.Errorf("data written after the re-attach: %s, wrote %s", got, after)
	}
}

// nbdListed: `rbd device list` sees a live rbd-nbd for dev (the kernel's
// pid attribute outlives a killed daemon).
func nbdListed(t *testing.T, dev string) bool {
	t.Helper()
	// runs: rbd (rbd-nbd list-mapped)
	out, err := exec.Command("rbd", "device", "list", "--device-type", "nbd", "--format", "json").Output()
	harness.Must(t, err, "rbd device list")
	return strings.Contains(string(out), `"device":"`+dev+`"`)
}

// nbdPid is the pid of the rbd-nbd serving dev, from the kernel (right
// after a map; it is not updated by a re-attach).
func nbdPid(t *testing.T, dev string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "pid"))
	harness.Must(t, err, "the daemon of %s", dev)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	harness.Must(t, err, "pid of %s", dev)
	return pid
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(harness.Slowdown() * 30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropCaches makes the next read come from the device, not the page cache.
func dropCaches() error {
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}
