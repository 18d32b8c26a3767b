package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// Two driver instances (two Kubernetes clusters) on one pool, sending the
// same request names: each sweep removes only its own instance's abandoned
// image, and neither lists nor deletes the other's volume.
// scripts/instances.sh runs the whole suite as two instances at once.
func TestInstancesSweepOnlyTheirOwn(t *testing.T) {
	e := setup(t)
	other := e.c
	other.Instance = e.c.Instance + "x" // "x" beside the default, "ax" beside a
	t.Cleanup(func() {
		if imgs := other.InstanceImages(t); len(imgs) > 0 {
			t.Errorf("instance %s left %v", other.Instance, imgs)
		}
	})
	for _, c := range []harness.Cluster{e.c, other} {
		if _, err := startController(t, c, "--test-crash-at", "CreateImage:created").create(t, "instances-abandoned", 8*mib); err == nil {
			t.Fatal("CreateVolume survived --test-crash-at CreateImage:created")
		}
	}
	theirs := startController(t, other, "--controller-secret-dir", harness.WriteControllerSecretDir(t, other))
	kept := theirs.mustCreate(t, "instances-kept", 8*mib)
	ours, before := e.c.InstanceImages(t), other.InstanceImages(t)
	if len(ours) != 1 || len(before) != 2 {
		t.Fatalf("want one unfinished image of ours, and one plus a volume of instance %s; have %v and %v", other.Instance, ours, before)
	}

	e.delete(t, kept.VolumeId)
	list, err := e.cc.ListVolumes(harness.Ctx(t), &csi.ListVolumesRequest{})
	harness.Must(t, err, "ListVolumes")
	for _, v := range list.Entries {
		if v.Volume.VolumeId == kept.VolumeId {
			t.Errorf("ListVolumes lists instance %s's volume", other.Instance)
		}
	}

	time.Sleep(1500 * time.Millisecond) // both unfinished images are older than one interval now
	sweep := func(c harness.Cluster, want []string) {
		swept := startController(t, c, "--reclaim-sweep-interval", "1s")
		scratch, err := swept.create(t, "instances-scratch", 8*mib)
		harness.Must(t, err, "create scratch")
		swept.delete(t, scratch.Volume.VolumeId)
		for deadline := time.Now().Add(time.Minute); !slices.Equal(c.InstanceImages(t), want); time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a minute after instance %q's delete its images are %v, want %v", c.Instance, c.InstanceImages(t), want)
			}
		}
	}
	// Each sweeps in turn; the other's images stay as they were.
	sweep(other, []string{imageOf(t, kept.VolumeId)})
	if now := e.c.InstanceImages(t); !slices.Equal(now, ours) {
		t.Fatalf("instance %s's sweep changed our images: %v, were %v", other.Instance, now, ours)
	}
	sweep(e.c, nil)
	if now := other.InstanceImages(t); !slices.Equal(now, []string{imageOf(t, kept.VolumeId)}) {
		t.Fatalf("our sweep changed instance %s's images: %v", other.Instance, now)
	}
}
