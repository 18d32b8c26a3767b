package node

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
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
// limited to its namespace, for a volume in the default one), or whose
// key is not the user's, is refused by Ceph, which rbd-fuse answers by
// spinning or exiting and rbd-nbd by exiting, without saying why:
// NodeStage fails with PermissionDenied before the caller gives up,
// naming the user and what to grant or check. Nothing stays: no process,
// mount, loop device, mapping or state record.
func TestStageWithUserWithoutAccess(t *testing.T) {
	c := harness.LoadCluster(t)
	tenant := c.Tenant(t, "tenant-denied")
	e := setup(t)
	fs := mountCap("ext4", singleWriter)
	v := e.createVolume("denied", 64*mib, fs)
	staging := e.path("denied-staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	const wrongKey = "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="
	for _, tc := range []struct {
		what    string
		secrets map[string]string
		words   []string
	}{
		{"a user that may not read the pool", tenant.Secrets(), []string{"Ceph refused client." + tenant.CSIUser + " on " + cluster.OnPool(c.Namespace, c.Pool) + ":",
			cluster.CapRBD(c.Namespace, c.Pool), cluster.CapsDoc}},
		{"a key that is not the user's", map[string]string{"userID": c.CSIUser, "userKey": wrongKey}, []string{"refused client." + c.CSIUser + ":",
			"userKey", cluster.CapsDoc}},
	} {
		req := e.stageReq(v, staging, fs)
		req.Secrets = tc.secrets
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		_, err := e.nc.NodeStageVolume(ctx, req)
		cancel()
		if err == nil {
			e.unstage(v, staging)
			t.Fatalf("staged with %s", tc.what)
		}
		expectCode(t, err, codes.PermissionDenied, "stage with "+tc.what)
		for _, w := range tc.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the stage with %s does not say %q: %v", tc.what, w, err)
			}
		}
		for _, k := range []string{tenant.CSIKey, c.CSIKey, wrongKey} {
			if strings.Contains(err.Error(), k) {
				t.Errorf("the stage with %s shows a key", tc.what)
			}
		}
		// The plugin undoes the attempt, also one that outlived the call.
		deadline := time.Now().Add(90 * time.Second)
		for {
			records, _ := os.ReadDir(filepath.Join(e.state, "volumes"))
			left := leftovers(e.dir)
			if len(left) == 0 && len(records) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("90 s after the stage with %s: left %v, state records %v", tc.what, left, records)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}
