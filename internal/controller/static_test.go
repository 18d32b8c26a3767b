package controller_test

import (
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A clone of a static volume takes a temporary snapshot of an image the
// sweeper does not read. Done, the clone leaves nothing on it; abandoned
// after a crash, the sweep finds the snapshot through the index and
// removes it.
func TestStaticCloneLeavesNoSnapshot(t *testing.T) {
	e := newEnv(t)
	const static = "legacy-image"
	must(t, e.ceph.CreateImage(ctx(t), e.pool, static, rbd.ImageSpec{Size: 8 * mib, Features: []string{"layering"}}), "CreateImage")
	handle := "v1:" + clusterID + ":" + poolName + ":" + static
	c := e.start("", noSweep)

	clone := c.mustCreate(t, "static-clone", fromVolume(handle))
	c.delete(t, clone)
	if snaps := e.userSnaps(t, static); len(snaps) != 0 {
		t.Fatalf("a finished clone left snapshots on the static image: %v", snaps)
	}
	if entries, err := e.ceph.ListOmap(ctx(t), e.pool, "rbdcsi.statictmp", ""); err != nil || len(entries) != 0 {
		t.Fatalf("a finished clone left its index entry: %v, %v", entries, err)
	}

	crashing := e.start("CreateVolume:source-snapshot", noSweep)
	if died, err := crash(func() error { _, err := crashing.createFrom(t, "abandoned", fromVolume(handle)); return err }); !died {
		t.Fatalf("CreateVolume did not reach CreateVolume:source-snapshot: %v", err)
	}
	if snaps := e.userSnaps(t, static); len(snaps) != 1 {
		t.Fatalf("want the abandoned clone's temporary snapshot, have %v", snaps)
	}
	time.Sleep(2 * interval)
	swept := e.start("", controller.Options{SweepInterval: interval})
	scratch := swept.mustCreate(t, "scratch", nil)
	swept.delete(t, scratch)
	waitFor(t, "the sweep removes the temporary snapshot", func() bool { return len(e.userSnaps(t, static)) == 0 })
	must(t, e.ceph.RemoveImage(ctx(t), e.pool, static), "RemoveImage")
	waitFor(t, "the index entry goes", func() bool { return len(e.leaks()) == 0 })
}
