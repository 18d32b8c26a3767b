package node

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A cluster-map entry with rbd.radosNamespace keeps a tenant's volumes,
// snapshots and clones in that namespace of the pool, used by a Ceph user
// that may touch nothing else, through controller and node alike (rbd-fuse
// here). The tenant's leftovers are checked in the namespace, which must
// then be removable.
func TestRadosNamespace(t *testing.T) {
	c := harness.LoadCluster(t)
	tenant := c.Tenant(t, "tenant-e2e")
	e := setupWith(t, tenant)
	fs := mountCap("ext4", singleWriter)
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)

	src := e.createVolume("ns-src", 64*mib, fs)
	writeSynced(t, filepath.Join(e.mountAt(src, "src", fs), "data"), data)
	snap, err := e.cc.CreateSnapshot(harness.Ctx(t), &csi.CreateSnapshotRequest{Name: "ns-snap", SourceVolumeId: src.VolumeId, Secrets: tenant.Secrets()})
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() {
		_, err := e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId, Secrets: tenant.Secrets()})
		harness.Must(t, err, "DeleteSnapshot")
	})
	restored := e.createFrom("ns-restore", 64*mib, fs, &csi.VolumeContentSource{
		Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}})
	expectContent(t, filepath.Join(e.mountAt(restored, "restore", fs), "data"), data, "the restore in the namespace")

	inNamespace := tenant.Images(t)
	for _, img := range e.images {
		if !slices.Contains(inNamespace, img) {
			t.Errorf("image %s is not in namespace %s (it holds %v)", img, tenant.Namespace, inNamespace)
		}
		if slices.Contains(c.Images(t), img) {
			t.Errorf("image %s is in the pool's default namespace", img)
		}
	}
}

// A Secret whose user may not read the volume's pool (here a tenant's,
// limited to its namespace, for a volume in the default one) makes
// rbd-fuse spin without answering. NodeStage fails, and the plugin then
// ends that rbd-fuse: no process, mount, loop device or state record stays.
func TestStageWithUserWithoutAccess(t *testing.T) {
	c := harness.LoadCluster(t)
	tenant := c.Tenant(t, "tenant-denied")
	e := setup(t)
	fs := mountCap("ext4", singleWriter)
	v := e.createVolume("denied", 64*mib, fs)
	staging := e.path("denied-staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	req := e.stageReq(v, staging, fs)
	req.Secrets = tenant.Secrets()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.nc.NodeStageVolume(ctx, req); err == nil {
		e.unstage(v, staging)
		t.Fatal("staged with a user that may not read the pool")
	}
	// The plugin undoes the attempt after the caller gave up.
	deadline := time.Now().Add(90 * time.Second)
	for {
		records, _ := os.ReadDir(filepath.Join(e.state, "volumes"))
		left := leftovers(e.dir)
		if len(left) == 0 && len(records) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the failed stage: left %v, state records %v", left, records)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
