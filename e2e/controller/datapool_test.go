package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A volume whose data lives in an erasure-coded pool (the StorageClass's
// dataPool; its header stays in the replicated pool): it is created,
// staged and written, snapshotted, restored (the restore's data in the EC
// pool too, with the snapshot's contents) and expanded.
func TestErasureCodedDataPool(t *testing.T) {
	e := setupAttach(t)
	if e.c.DataPool == "" {
		t.Fatal("the cluster has no erasure-coded data pool (CEPH_DATA_POOL): scripts/ceph-cluster.sh makes one unless CEPH_EC_POOL=0")
	}
	params := e.c.Params("dataPool", e.c.DataPool)
	create := func(name string, src *csi.VolumeContentSource) *csi.Volume {
		t.Helper()
		resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib}, VolumeCapabilities: fsCap(),
			Parameters: params, Secrets: e.c.Secrets(), VolumeContentSource: src,
		})
		harness.Must(t, err, "CreateVolume %s", name)
		t.Cleanup(func() { e.delete(t, resp.Volume.VolumeId) })
		info, err := e.c.RBD(append([]string{"info", "--pool", e.c.Pool, imageOf(t, resp.Volume.VolumeId)}, e.c.NamespaceArgs()...)...)
		harness.Must(t, err, "rbd info")
		if !strings.Contains(info, "data_pool: "+e.c.DataPool) {
			t.Errorf("volume %s: its data is not in %s: %s", name, e.c.DataPool, info)
		}
		return resp.Volume
	}
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	// use stages vol on node-a, runs do on its filesystem and unstages it.
	use := func(vol *csi.Volume, do func(root string)) {
		t.Helper()
		harness.Must(t, e.publish(t, vol.VolumeId, "node-a", rwo, false), "publish")
		defer e.unpublish(t, vol.VolumeId, "node-a")
		staging, err := os.MkdirTemp("", "rbdcsi-ec-")
		harness.Must(t, err, "staging dir")
		defer os.Remove(staging) // empty once unstaged; never RemoveAll a possible mount
		harness.Must(t, e.stage(t, "node-a", vol, staging), "stage")
		defer e.unstage(t, "node-a", vol, staging)
		do(staging)
	}
	data := strings.Repeat("erasure-coded ", 1<<16) // ~900 KiB over several objects
	write := func(root, name, text string) {
		f, err := os.Create(filepath.Join(root, name))
		harness.Must(t, err, "create")
		_, err = f.WriteString(text)
		harness.Must(t, err, "write")
		harness.Must(t, f.Sync(), "fsync")
		harness.Must(t, f.Close(), "close")
	}
	read := func(root, name, want string) {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: read %d bytes (%v), want the %d written", name, len(got), err, len(want))
		}
	}

	src := create("ec-src", nil)
	use(src, func(root string) { write(root, "data", data) })
	snap, err := e.snapshot(t, "ec-snap", src.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	defer e.deleteSnapshot(t, snap.SnapshotId)
	use(src, func(root string) {
		read(root, "data", data)
		write(root, "data", "after the snapshot")
	})
	restored := create("ec-restored", fromSnapshot(snap.SnapshotId))
	use(restored, func(root string) { read(root, "data", data) })

	resp, err := e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: src.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 128 * mib}, VolumeCapability: rwo, Secrets: e.c.Secrets()})
	harness.Must(t, err, "expand")
	if resp.CapacityBytes != 128*mib {
		t.Errorf("expanded to %d bytes", resp.CapacityBytes)
	}
	use(src, func(root string) { read(root, "data", "after the snapshot") })
}
