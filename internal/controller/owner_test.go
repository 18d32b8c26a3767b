package controller_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// A volume's image names the PVC and PV it was made for, as the
// provisioner's --extra-create-metadata gives them, so `rbd image-meta
// list` tells an admin who owns it; a clone names its own, not its
// source's. Without those keys nothing is written.
func TestImageNamesItsOwner(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	create := func(name string, src *csi.VolumeContentSource, owner ...string) (string, error) {
		params := map[string]string{"clusterID": clusterID, "pool": poolName}
		if len(owner) == 3 {
			params["csi.storage.k8s.io/pvc/name"] = owner[0]
			params["csi.storage.k8s.io/pvc/namespace"] = owner[1]
			params["csi.storage.k8s.io/pv/name"] = owner[2]
		}
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
			Parameters: params, Secrets: secrets(), VolumeContentSource: src,
		})
		if err != nil {
			return "", err
		}
		t.Cleanup(func() { c.delete(t, resp.Volume.VolumeId) })
		return resp.Volume.VolumeId, nil
	}
	owner := func(id string) string {
		info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, id))
		must(t, err, "Stat")
		var kv []string
		for _, k := range []string{"rbdcsi.k8s.pvc.namespace", "rbdcsi.k8s.pvc.name", "rbdcsi.k8s.pv.name"} {
			if v, ok := info.Metadata[k]; ok {
				kv = append(kv, v)
			}
		}
		return strings.Join(kv, "/")
	}

	src, err := create("pvc-1", nil, "data", "shop", "pvc-1")
	must(t, err, "CreateVolume")
	if got := owner(src); got != "shop/data/pvc-1" {
		t.Errorf("new volume: owner %q, want shop/data/pvc-1", got)
	}
	clone, err := create("pvc-2", fromVolume(src), "copy", "shop", "pvc-2")
	must(t, err, "CreateVolume clone")
	if got := owner(clone); got != "shop/copy/pvc-2" {
		t.Errorf("clone: owner %q, want shop/copy/pvc-2", got)
	}
	bare, err := create("pvc-3", nil)
	must(t, err, "CreateVolume without owner")
	if got := owner(bare); got != "" {
		t.Errorf("no --extra-create-metadata: owner %q, want none", got)
	}
	_, err = create("pvc-4", nil, strings.Repeat("n", 254), "shop", "pvc-4")
	wantCode(t, err, codes.InvalidArgument, "a PVC name longer than Kubernetes allows")
}

// A snapshot's image names the VolumeSnapshot it was taken for, under the
// RBD snapshot's name, while the snapshot lives; a retry does not change
// it, and DeleteSnapshot takes it away.
func TestImageNamesItsSnapshots(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	vol := c.mustCreate(t, "pvc-1", nil)
	t.Cleanup(func() { c.delete(t, vol) })
	params := map[string]string{
		"csi.storage.k8s.io/volumesnapshot/name":        "nightly",
		"csi.storage.k8s.io/volumesnapshot/namespace":   "shop",
		"csi.storage.k8s.io/volumesnapshotcontent/name": "snapcontent-1",
	}
	take := func() (*csi.Snapshot, error) {
		resp, err := c.c.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: vol, Parameters: params, Secrets: secrets()})
		if err != nil {
			return nil, err
		}
		return resp.Snapshot, nil
	}
	names := func() map[string]string {
		info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, vol))
		must(t, err, "Stat")
		out := map[string]string{}
		for k, v := range info.Metadata {
			if strings.HasPrefix(k, "rbdcsi.k8s.snap.") {
				out[k] = v
			}
		}
		return out
	}

	snap, err := take()
	must(t, err, "CreateSnapshot")
	const want = `{"volumeSnapshot":"nightly","namespace":"shop","volumeSnapshotContent":"snapcontent-1"}`
	rbdSnap := snap.SnapshotId[strings.LastIndex(snap.SnapshotId, ":")+1:]
	if got := names(); len(got) != 1 || got["rbdcsi.k8s.snap."+rbdSnap] != want {
		t.Fatalf("after CreateSnapshot: %v, want %s under rbdcsi.k8s.snap.%s", got, want, rbdSnap)
	}
	_, err = take()
	must(t, err, "CreateSnapshot again")
	if got := names(); len(got) != 1 || got["rbdcsi.k8s.snap."+rbdSnap] != want {
		t.Fatalf("after the retry: %v", got)
	}
	_, err = c.c.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId, Secrets: secrets()})
	must(t, err, "DeleteSnapshot")
	if got := names(); len(got) != 0 {
		t.Fatalf("after DeleteSnapshot: %v", got)
	}

	params["csi.storage.k8s.io/volumesnapshot/name"] = strings.Repeat("n", 254)
	_, err = take()
	wantCode(t, err, codes.InvalidArgument, "a VolumeSnapshot name longer than Kubernetes allows")
}
