package controller_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// depth counts an image's clone ancestors by following its parents.
func (e *env) depth(t *testing.T, image string) int {
	t.Helper()
	f, err := e.ceph.StatFamily(ctx(t), e.pool, image, "")
	must(t, err, "StatFamily "+image)
	n := 0
	for ; f.Parent != nil && n < 64; n++ {
		f, err = e.ceph.StatFamily(ctx(t), e.pool, "", f.Parent.ImageID)
		must(t, err, "StatFamily of a parent")
	}
	return n
}

// Restore from restore from restore... past the soft and hard depths: no
// volume is handed out deeper than the hard depth, in the end none is
// deeper than the soft one, and the recorded depth is the real one.
func TestCloneChainsStayBounded(t *testing.T) {
	const soft, hard = 1, 2
	e := newEnv(t)
	c := e.start("", controller.Options{CloneDepthSoft: soft, CloneDepthHard: hard})
	vols := []string{c.mustCreate(t, "chain-0", nil)}
	var snaps []string
	for i := 1; i <= 5; i++ {
		snaps = append(snaps, c.mustSnapshot(t, fmt.Sprintf("chain-snap-%d", i), vols[i-1]))
		var v string
		var err error
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			v, err = c.createFrom(t, fmt.Sprintf("chain-%d", i), fromSnapshot(snaps[i-1]))
			if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
				break
			}
			// A flatten is running: retry as the sidecar would.
		}
		must(t, err, fmt.Sprintf("restore level %d", i))
		vols = append(vols, v)
		if d := e.depth(t, imageOf(t, v)); d > hard {
			t.Fatalf("level %d returned with %d clone ancestors, over the hard depth %d", i, d, hard)
		}
	}
	for _, v := range vols {
		waitFor(t, v+" flattened within the soft depth", func() bool { return e.depth(t, imageOf(t, v)) <= soft })
		info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, v))
		must(t, err, "Stat")
		if d, _ := strconv.Atoi(info.Metadata["rbdcsi.depth"]); d != e.depth(t, imageOf(t, v)) {
			t.Errorf("%s records depth %d, has %d clone ancestors", v, d, e.depth(t, imageOf(t, v)))
		}
	}
	for i := len(vols) - 1; i >= 0; i-- {
		if i < len(snaps) {
			c.deleteSnapshot(t, snaps[i])
		}
		c.delete(t, vols[i])
	}
	e.expectEmpty(t)
}

// A snapshot name is claimed for its source: the same name for another
// source is AlreadyExists, and a retry for the same one returns the same
// snapshot. Past --max-snapshots-per-image a volume takes no more
// snapshots, nor volume clones (which need one), and the refused name
// stays free for another source.
func TestSnapshotClaimsAndLimit(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{MaxSnapshotsPerImage: 2})
	v := c.mustCreate(t, "limited", nil)
	w := c.mustCreate(t, "other", nil)
	first := c.mustSnapshot(t, "limited-0", v)
	if again := c.mustSnapshot(t, "limited-0", v); again != first {
		t.Fatalf("retried CreateSnapshot returned %s, first %s", again, first)
	}
	_, err := c.snapshot(t, "limited-0", w)
	wantCode(t, err, codes.AlreadyExists, "the name for another source")
	second := c.mustSnapshot(t, "limited-1", v)

	_, err = c.snapshot(t, "limited-2", v)
	wantCode(t, err, codes.ResourceExhausted, "a snapshot past the limit")
	_, err = c.createFrom(t, "limited-clone", fromVolume(v))
	wantCode(t, err, codes.ResourceExhausted, "a clone past the limit")
	third := c.mustSnapshot(t, "limited-2", w)

	for _, s := range []string{first, second, third} {
		c.deleteSnapshot(t, s)
	}
	c.delete(t, v)
	c.delete(t, w)
	e.expectEmpty(t)
}
