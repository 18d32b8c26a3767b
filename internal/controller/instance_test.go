package controller_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// Two Kubernetes clusters share a pool, one on the default instance, one on
// instance "b", and send the same request names. Each instance's sweep
// takes only its own abandoned work; ListVolumes, ListSnapshots and
// DeleteVolume never reach the other's volumes.
func TestInstancesSweepOnlyTheirOwn(t *testing.T) {
	e := newEnv(t)
	type leftovers struct {
		c                         *ctrl
		unfinished, kept, claim   string
		keptID, snapID, claimSnap string
	}
	left := map[string]*leftovers{}
	for _, inst := range []string{"", "b"} {
		l := &leftovers{}
		died, err := crash(func() error {
			_, err := e.start("CreateImage:created", controller.Options{InstanceID: inst}).create(t, "abandoned")
			return err
		})
		if !died {
			t.Fatalf("instance %q: CreateVolume did not reach CreateImage:created: %v", inst, err)
		}
		l.c = e.start("", controller.Options{InstanceID: inst, Credentials: ownCreds()})
		l.keptID = l.c.mustCreate(t, "kept", nil)
		l.snapID, err = l.c.snapshot(t, "snap", l.keptID)
		must(t, err, "CreateSnapshot")
		died, err = crash(func() error {
			_, err := e.start("CreateSnapshot:claimed", controller.Options{InstanceID: inst}).snapshot(t, "abandoned-snap", l.keptID)
			return err
		})
		if !died {
			t.Fatalf("instance %q: CreateSnapshot did not reach CreateSnapshot:claimed: %v", inst, err)
		}
		left[inst] = l
	}
	images := e.images()
	if len(images) != 4 {
		t.Fatalf("want an unfinished and a finished image per instance, have %v", images)
	}
	// The other instance's DeleteVolume takes the ID for not its own.
	left[""].c.delete(t, left["b"].keptID)
	if !slices.Equal(e.images(), images) {
		t.Fatalf("the default instance's DeleteVolume of instance b's volume changed the pool: %v, was %v", e.images(), images)
	}
	for inst, l := range left {
		vols, err := l.c.c.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
		must(t, err, "ListVolumes")
		if len(vols.Entries) != 1 || vols.Entries[0].Volume.VolumeId != l.keptID {
			t.Errorf("instance %q lists %v, want only %s", inst, vols.Entries, l.keptID)
		}
		snaps, err := l.c.c.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{})
		must(t, err, "ListSnapshots")
		if len(snaps.Entries) != 1 || snaps.Entries[0].Snapshot.SnapshotId != l.snapID {
			t.Errorf("instance %q lists snapshots %v, want only %s", inst, snaps.Entries, l.snapID)
		}
	}

	// Each instance in turn sweeps: what it abandoned goes, the other's stays.
	time.Sleep(2 * interval)
	claims := func(inst string) int {
		obj := "rbdcsi.snapclaims"
		if inst != "" {
			obj += "." + inst
		}
		kv, err := e.ceph.ListOmap(ctx(t), e.pool, obj, "")
		must(t, err, "ListOmap "+obj)
		return len(kv)
	}
	unfinished := func(inst string) bool {
		for _, img := range e.images() {
			if img != imageOf(t, left[inst].keptID) && strings.HasSuffix(img, map[string]string{"": "", "b": ".b"}[inst]) &&
				(inst != "" || !strings.Contains(img, ".")) {
				return true
			}
		}
		return false
	}
	sweep := func(inst string) {
		sweeper := e.start("", controller.Options{InstanceID: inst, SweepInterval: interval})
		sweeper.delete(t, sweeper.mustCreate(t, "scratch", nil))
		waitFor(t, "instance "+inst+"'s sweep removes its unfinished image and withdraws its claim", func() bool {
			return !unfinished(inst) && claims(inst) == 0
		})
	}
	sweep("b")
	if !unfinished("") || claims("") != 1 || len(e.images()) != 3 {
		t.Fatalf("instance b's sweep took the default instance's work: images %v, %d claims", e.images(), claims(""))
	}
	sweep("")
	if len(e.images()) != 2 {
		t.Fatalf("after both sweeps, want the two finished volumes, have %v", e.images())
	}
	for _, l := range left {
		l.c.deleteSnapshot(t, l.snapID)
		l.c.delete(t, l.keptID)
	}
	e.expectEmpty(t)
}
