package dr

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The controller's sweep leaves a non-primary copy alone, however
// unfinished it looks: it is the peer's, and only the primary's site
// decides what becomes of it. A CreateVolume on A that crashed between
// creating the image and naming it leaves an unfinished image; mirrored
// (by an admin: the driver mirrors only finished volumes), B's rbd-mirror
// makes a copy of it. With B's rbd-mirror stopped, nothing watches the
// copy: it looks exactly like what the sweep removes (unfinished, older
// than the sweep interval, no watcher, no snapshot). B's sweep after a
// delete leaves it where it is, as it is, and says so; the copy then
// still replays from A once B's rbd-mirror is back.
//
// It stops site b's rbd-mirror, so it runs alone, as
// TestFailoverAndFailback does.
func TestSweepLeavesNonPrimaryCopy(t *testing.T) {
	ca, err := harness.ClusterFromDir(os.Getenv("DR_A_DIR"))
	harness.Must(t, err, "site a")
	cb, err := harness.ClusterFromDir(os.Getenv("DR_B_DIR"))
	harness.Must(t, err, "site b")

	crashing := start(t, "a", ca, cb.ClusterID, "--test-crash-at", "CreateImage:created")
	before := crashing.c.Images(t)
	_, err = crashing.cc.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "dr-sweep", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		}},
		Parameters: ca.Params(), Secrets: ca.Secrets(),
	})
	if err == nil {
		t.Fatal("CreateVolume survived --test-crash-at CreateImage:created")
	}
	var image string
	for _, img := range crashing.c.Images(t) {
		if !slices.Contains(before, img) {
			image = img
		}
	}
	if image == "" {
		t.Fatalf("the crashed CreateVolume left no image on A (images %v)", crashing.c.Images(t))
	}
	b := start(t, "b", cb, ca.ClusterID, "--reclaim-sweep-interval", "1s")
	t.Cleanup(func() { removeEverywhere(t, image, crashing, b) })

	out, err := ca.RBD("mirror", "image", "enable", ca.Pool+"/"+image, "snapshot")
	harness.Must(t, err, "mirroring the unfinished image on A: %s", out)
	b.waitReplaying(t, image)
	if b.primary(t, image) {
		t.Fatal("B's copy is primary")
	}
	idB := b.imageID(t, image)

	restart := b.stopMirror(t)
	eventually(t, "B's copy without watchers", time.Minute, func() (bool, string) {
		w := b.watchers(t, image)
		return w == 0, fmt.Sprintf("%d watchers", w)
	})
	time.Sleep(1500 * time.Millisecond) // the copy is older than one sweep interval now

	// A delete in B's pool starts a sweep there.
	scratch := b.createVolume(t, b, "dr-sweep-scratch", 8*mib)
	_, err = b.cc.DeleteVolume(ctx(t), deleteReq(b, scratch))
	harness.Must(t, err, "DeleteVolume on B")
	removing := `"removing an unfinished volume image that no retry came back for" pool="` + cb.Pool + `" image="` + image + `"`
	left := `"leaving a non-primary mirror copy to its primary site" pool="` + cb.Pool + `" image="` + image + `"`
	eventually(t, "B's sweep leaving the copy alone", time.Minute, func() (bool, string) {
		logs := b.p.Logs()
		if strings.Contains(logs, removing) {
			t.Fatalf("B's sweep tried to remove the non-primary copy %s", image)
		}
		return strings.Contains(logs, left), "no sweep reached it yet"
	})
	if !b.has(image) || b.primary(t, image) || b.imageID(t, image) != idB {
		t.Fatal("B's copy changed in the sweep")
	}
	if !crashing.has(image) || !crashing.primary(t, image) {
		t.Fatal("A's image changed in B's sweep")
	}

	restart()
	b.waitReplaying(t, image)
}

// stopMirror stops the site's rbd-mirror (SIGTERM, by the PID that
// scripts/dr-cluster.sh recorded, checked against its command line) until
// the returned function starts it again through the same script; the
// test's cleanup starts it in any case.
func (s *site) stopMirror(t *testing.T) (restart func()) {
	t.Helper()
	pidFile := filepath.Join(s.c.Dir, "rbd-mirror.pid")
	data, err := os.ReadFile(pidFile)
	harness.Must(t, err, "site %s: rbd-mirror's PID", s.name)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	harness.Must(t, err, "site %s: %s", s.name, pidFile)
	running := func() bool {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return err == nil && strings.HasPrefix(string(cmdline), "rbd-mirror\x00-c\x00"+s.c.Conf+"\x00")
	}
	if !running() {
		t.Fatalf("site %s: no rbd-mirror runs as PID %d", s.name, pid)
	}
	restart = harness.UndoOnce(t, func() {
		script, err := filepath.Abs("../../scripts/dr-cluster.sh")
		harness.Must(t, err, "dr-cluster.sh")
		// runs: scripts/dr-cluster.sh
		out, err := exec.Command(script, "up", filepath.Dir(s.c.Dir)).CombinedOutput()
		harness.Must(t, err, "site %s: starting rbd-mirror again: %s", s.name, out)
	})
	harness.Must(t, syscall.Kill(pid, syscall.SIGTERM), "site %s: SIGTERM rbd-mirror %d", s.name, pid)
	eventually(t, "site "+s.name+"'s rbd-mirror stopped", 30*time.Second, func() (bool, string) {
		return !running(), "still running"
	})
	return restart
}

// watchers counts the clients watching the site's image (rbd status).
func (s *site) watchers(t *testing.T, image string) int {
	out, err := s.c.RBD("status", "--format", "json", s.c.Pool+"/"+image)
	harness.Must(t, err, "rbd status %s on site %s: %s", image, s.name, out)
	var st struct {
		Watchers []json.RawMessage `json:"watchers"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &st), "parsing %s", out)
	return len(st.Watchers)
}
