package controller

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A StorageClass's volumeNamePrefix shows in `rbd ls`, and the volume
// snapshots, restores and deletes like any other.
func TestVolumeNamePrefixShowsInRbdLs(t *testing.T) {
	c := harness.LoadCluster(t)
	p := harness.StartPlugin(t, c, "--mode", "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, c),
		"--volume-name-prefixes", "k8s-e2e-,k8s-other-")
	t.Cleanup(func() { c.ExpectNoImages(t) })
	e := env{c: c, p: p, cc: p.Controller()}
	resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: "named", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCap(),
		Parameters: c.Params("volumeNamePrefix", "k8s-e2e-"), Secrets: c.Secrets(),
	})
	harness.Must(t, err, "CreateVolume")
	img := imageOf(t, resp.Volume.VolumeId)
	if !strings.HasPrefix(img, "k8s-e2e-") {
		t.Fatalf("image %q does not carry the StorageClass's prefix", img)
	}
	if ls := strings.Fields(strings.Join(c.Images(t), " ")); len(ls) != 1 || ls[0] != img {
		t.Errorf("rbd ls: %v, want [%s]", ls, img)
	}
	snap, err := e.snapshot(t, "named-snap", resp.Volume.VolumeId)
	harness.Must(t, err, "snapshot")
	restored, err := e.createFrom(t, "named-restored", 8*mib, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore")
	e.delete(t, restored.VolumeId)
	e.deleteSnapshot(t, snap.SnapshotId)
	e.delete(t, resp.Volume.VolumeId)
}
