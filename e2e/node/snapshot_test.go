package node

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// createFrom creates a volume from a snapshot or a volume and deletes it
// when the test ends.
func (e *env) createFrom(name string, size int64, c *csi.VolumeCapability, src *csi.VolumeContentSource, params ...string) *csi.Volume {
	e.t.Helper()
	resp, err := e.cc.CreateVolume(harness.Ctx(e.t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{c},
		Parameters: e.c.Params(params...), Secrets: e.secrets(), VolumeContentSource: src,
	})
	harness.Must(e.t, err, "CreateVolume %s from %v", name, src)
	id := resp.Volume.VolumeId
	e.images = append(e.images, id[strings.LastIndex(id, ":")+1:])
	e.t.Cleanup(func() {
		_, err := e.cc.DeleteVolume(harness.Ctx(e.t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.secrets()})
		harness.Must(e.t, err, "DeleteVolume %s", name)
	})
	return resp.Volume
}

// mountAt stages and publishes v under the test's paths; the test's
// cleanup undoes it.
func (e *env) mountAt(v *csi.Volume, name string, c *csi.VolumeCapability) string {
	e.t.Helper()
	staging, target := e.path(name+"-staging"), e.path(name+"-target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	return target
}

// writeSynced writes data to dir/file and fsyncs it: a snapshot holds what
// reached the image, not what sits in the page cache.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	harness.Must(t, err, "create %s", path)
	_, err = f.Write(data)
	harness.Must(t, err, "write %s", path)
	harness.Must(t, f.Sync(), "fsync %s", path)
	harness.Must(t, f.Close(), "close %s", path)
}

func expectContent(t *testing.T, path string, want []byte, what string) {
	t.Helper()
	got, err := os.ReadFile(path)
	harness.Must(t, err, "read %s", path)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %s holds other data (%d bytes)", what, path, len(got))
	}
}

// Data through the node path: a restore holds the snapshot-time data, a
// clone holds its source's data, and both are writable without touching
// the source.
func TestSnapshotRestoreAndCloneData(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	before, after := make([]byte, 1<<20), make([]byte, 1<<20)
	_, _ = rand.Read(before)
	_, _ = rand.Read(after)

	src := e.createVolume("data-src", 64*mib, c)
	srcDir := e.mountAt(src, "src", c)
	writeSynced(t, filepath.Join(srcDir, "data"), before)
	snap, err := e.cc.CreateSnapshot(harness.Ctx(t), &csi.CreateSnapshotRequest{Name: "data-snap", SourceVolumeId: src.VolumeId, Secrets: e.c.Secrets()})
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() {
		_, err := e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId, Secrets: e.c.Secrets()})
		harness.Must(t, err, "DeleteSnapshot")
	})
	writeSynced(t, filepath.Join(srcDir, "data"), after)

	restored := e.createFrom("data-restore", 64*mib, c, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}})
	restoredDir := e.mountAt(restored, "restored", c)
	expectContent(t, filepath.Join(restoredDir, "data"), before, "the restore")

	clone := e.createFrom("data-clone", 64*mib, c, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}})
	cloneDir := e.mountAt(clone, "clone", c)
	expectContent(t, filepath.Join(cloneDir, "data"), after, "the clone")

	// Both are writable, and the source does not see it.
	writeSynced(t, filepath.Join(restoredDir, "data"), []byte("restore's own"))
	writeSynced(t, filepath.Join(cloneDir, "data"), []byte("clone's own"))
	expectContent(t, filepath.Join(srcDir, "data"), after, "the source after writes to its restore and clone")
	expectContent(t, filepath.Join(restoredDir, "data"), []byte("restore's own"), "the restore after its write")
}
