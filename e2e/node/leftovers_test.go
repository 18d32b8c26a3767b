package node

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// leftovers lists what the node still holds under dir (see
// harness.FindLeftovers); a failed scan counts as a leftover, so that it
// cannot pass for a clean node.
func leftovers(dir string) []string {
	l, err := harness.FindLeftovers(dir)
	left := l.Describe()
	if err != nil {
		left = append(left, "scanning the node: "+err.Error())
	}
	return left
}

// mountsUnder lists the mounts at or below dir as "point (type from source)".
func mountsUnder(dir string) []string {
	ms, err := harness.MountsUnder(dir)
	if err != nil {
		return []string{"cannot read mountinfo: " + err.Error()}
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.String()
	}
	return out
}

// mountSource is the device mounted at path, "" if none.
func mountSource(path string) string {
	ms, _ := harness.MountsUnder(path)
	src := ""
	for _, m := range ms {
		if m.Point == path {
			src = m.Source // the last one is the top of the stack
		}
	}
	return src
}

// mappings are what keeps the suite's images mapped: with fuse, the live
// rbd-fuse processes with an argument under dir; with krbd and nbd, the
// kernel's mapped devices. A failed scan finds none, which the callers'
// counts catch.
func mappings(dir string) []string {
	if mounter() != "fuse" {
		m, _ := harness.KernelMappings()
		return m
	}
	pids, _ := harness.RBDFuseProcs(dir)
	out := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = fmt.Sprintf("rbd-fuse process %d", pid)
	}
	return out
}

// dropMapping takes a mapping away behind the plugin's back, as a reboot
// does: the loop device of a fuse mapping, the kernel's rbd device, or the
// nbd device with its rbd-nbd process.
func dropMapping(t *testing.T, dev string) {
	t.Helper()
	var err error
	switch mounter() {
	case "fuse":
		err = exec.Command("losetup", "--detach", dev).Run()
	case "krbd":
		id := strings.TrimPrefix(dev, "/dev/rbd")
		err = os.WriteFile("/sys/bus/rbd/remove_single_major", []byte(id), 0o200)
	default:
		// runs: rbd-nbd (rbd device unmap -t nbd ends it)
		err = exec.Command("rbd", "device", "unmap", "--device-type", "nbd", dev).Run()
	}
	harness.Must(t, err, "dropping the %s mapping %s", mounter(), dev)
}
