package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// usedBytes is what `rbd du --exact` says an image uses: counted from the
// objects that exist, not from the object map.
func (e *env) usedBytes(image string) uint64 {
	e.t.Helper()
	out, err := e.c.RBD(append([]string{"du", "--exact", "--format", "json", "--pool", e.c.Pool, image}, e.c.NamespaceArgs()...)...)
	harness.Must(e.t, err, "rbd du")
	var du struct {
		Images []struct {
			Name string `json:"name"`
			Used uint64 `json:"used_size"`
		} `json:"images"`
	}
	harness.Must(e.t, json.Unmarshal([]byte(out), &du), "rbd du output %q", out)
	for _, i := range du.Images {
		if i.Name == image {
			return i.Used
		}
	}
	e.t.Fatalf("rbd du lists no %s: %s", image, out)
	return 0
}

// A file deleted in a volume gives its space back to Ceph once the node
// trims (here on SIGUSR1, as an admin would ask): rbd du falls. The fuse
// mapper cannot pass discards on, and the trim says so.
func TestFstrimGivesSpaceBack(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("trim", 256<<20, c)
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	staging := e.path("staging")
	e.stage(v, staging, c)
	defer e.unstage(v, staging)

	const size = 48 << 20
	writeRandom(t, filepath.Join(staging, "data"), size)
	before := e.usedBytes(image)
	harness.Must(t, os.Remove(filepath.Join(staging, "data")), "remove")
	syscall.Sync()

	runs := strings.Count(e.p.Logs(), "trimmed staged filesystems")
	harness.Must(t, syscall.Kill(e.p.PID(), syscall.SIGUSR1), "SIGUSR1")
	deadline := time.Now().Add(harness.Slowdown() * time.Minute)
	for strings.Count(e.p.Logs(), "trimmed staged filesystems") == runs {
		if time.Now().After(deadline) {
			t.Fatalf("no trim run after SIGUSR1; log:\n%s", e.p.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	after := e.usedBytes(image)
	t.Logf("%s: rbd du used %d MiB with the file, %d MiB after it was deleted and trimmed", mounter(), before>>20, after>>20)
	if mounter() == "fuse" {
		if !strings.Contains(e.p.Logs(), `result="unsupported"`) {
			t.Errorf("the fuse mapper's trim was not reported unsupported; log:\n%s", e.p.Logs())
		}
		return
	}
	if !strings.Contains(e.p.Logs(), `result="ok"`) || after+size*2/3 > before {
		t.Errorf("the trim gave back %d of the %d MiB deleted (used %d -> %d MiB)", (before-min(before, after))>>20, size>>20, before>>20, after>>20)
	}
}
