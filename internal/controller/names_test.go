package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A StorageClass's volumeNamePrefix names its images, where the controller
// was given the prefix; such volumes list, snapshot, clone and delete like
// any, and a create retried finds its image.
func TestVolumeNamePrefix(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{VolumeNamePrefixes: []string{"k8s-prod-"}, Credentials: ownCreds()})
	create := func(name, prefix string, src *csi.VolumeContentSource) (string, error) {
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
			Parameters: map[string]string{"clusterID": clusterID, "pool": poolName, "volumeNamePrefix": prefix},
			Secrets:    secrets(), VolumeContentSource: src,
		})
		if err != nil {
			return "", err
		}
		return resp.Volume.VolumeId, nil
	}
	id, err := create("pvc-1", "k8s-prod-", nil)
	must(t, err, "CreateVolume")
	if img := imageOf(t, id); !strings.HasPrefix(img, "k8s-prod-") || len(img) != len("k8s-prod-")+20 {
		t.Fatalf("image %q, want k8s-prod- and 20 hex digits", img)
	}
	again, err := create("pvc-1", "k8s-prod-", nil)
	if err != nil || again != id {
		t.Fatalf("retried create: %q, %v; want %q", again, err, id)
	}
	list, err := c.c.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	must(t, err, "ListVolumes")
	if len(list.Entries) != 1 || list.Entries[0].Volume.VolumeId != id {
		t.Errorf("ListVolumes: %v, want only %s", list.Entries, id)
	}
	snap := c.mustSnapshot(t, "snap-1", id)
	snaps, err := c.c.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{SnapshotId: snap})
	must(t, err, "ListSnapshots")
	if len(snaps.Entries) != 1 || snaps.Entries[0].Snapshot.SourceVolumeId != id {
		t.Errorf("ListSnapshots: %v, want source %s", snaps.Entries, id)
	}
	restored, err := create("pvc-2", "k8s-prod-", fromSnapshot(snap))
	must(t, err, "restore")
	c.delete(t, restored)
	_, err = c.c.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap, Secrets: secrets()})
	must(t, err, "DeleteSnapshot")
	c.delete(t, id)
	if names, err := e.ceph.ListImages(ctx(t), e.pool); err != nil || len(names) != 0 {
		t.Errorf("left in the pool: %v, %v", names, err)
	}

	_, err = create("pvc-3", "k8s-dev-", nil)
	wantCode(t, err, codes.InvalidArgument, "a prefix the controller was not given")
	if err == nil || !strings.Contains(err.Error(), "--volume-name-prefixes") {
		t.Errorf("the refusal does not say how to allow it: %v", err)
	}
}

// The sweep removes an abandoned, unfinished image named with a prefix the
// controller was given, and leaves one with a prefix it was not given,
// which may be anyone's.
func TestSweepKnowsOnlyItsPrefixes(t *testing.T) {
	e := newEnv(t)
	opts := controller.Options{VolumeNamePrefixes: []string{"k8s-prod-"}}
	crashing := e.start("CreateImage:created", opts)
	died, err := crash(func() error {
		_, err := crashing.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: "abandoned", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
			Parameters: map[string]string{"clusterID": clusterID, "pool": poolName, "volumeNamePrefix": "k8s-prod-"}, Secrets: secrets(),
		})
		return err
	})
	if !died {
		t.Fatalf("CreateVolume did not reach CreateImage:created: %v", err)
	}
	foreign := "k8s-dev-0123456789abcdef0123"
	must(t, e.ceph.CreateImage(ctx(t), e.pool, foreign, rbd.ImageSpec{Size: mib, Features: []string{"layering"}}), "CreateImage "+foreign)
	if imgs := e.images(); len(imgs) != 2 {
		t.Fatalf("want the unfinished and the foreign image, have %v", imgs)
	}

	time.Sleep(2 * interval)
	swept := e.start("", controller.Options{VolumeNamePrefixes: []string{"k8s-prod-"}, SweepInterval: interval})
	scratch := swept.mustCreate(t, "scratch", nil)
	swept.delete(t, scratch)
	waitFor(t, "the sweep removes the unfinished k8s-prod- image", func() bool {
		imgs := e.images()
		return len(imgs) == 1 && imgs[0] == foreign
	})
	must(t, e.ceph.RemoveImage(ctx(t), e.pool, foreign), "RemoveImage "+foreign)
}
