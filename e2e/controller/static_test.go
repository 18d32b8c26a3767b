package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// importFilesystem makes an image that already holds an ext4 filesystem
// with the given files, as another driver would leave it, and removes it
// when the test ends.
func importFilesystem(t *testing.T, c harness.Cluster, image string, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	harness.Must(t, os.Mkdir(root, 0o755), "mkdir")
	for name, data := range files {
		harness.Must(t, os.WriteFile(filepath.Join(root, name), []byte(data), 0o644), "write %s", name)
	}
	file := filepath.Join(dir, "fs.img")
	f, err := os.Create(file)
	harness.Must(t, err, "create")
	harness.Must(t, f.Truncate(64*mib), "truncate")
	harness.Must(t, f.Close(), "close")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// runs: mkfs.ext4 (e2fsprogs), -d copies the directory into the new filesystem
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-d", root, file).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	_, err = c.RBD(append([]string{"import", "--pool", c.Pool, file, image}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd import")
	t.Cleanup(func() {
		if _, err := c.RBD(append([]string{"rm", "--pool", c.Pool, image}, c.NamespaceArgs()...)...); err != nil {
			t.Errorf("removing the static image: %v", err)
		}
	})
}

// An image this driver did not create (here named as ceph-csi names its
// own, holding a filesystem with data) becomes a static volume: it
// attaches with our records, stages with its data untouched, expands, and
// survives DeleteVolume.
func TestStaticVolume(t *testing.T) {
	e := setupAttach(t)
	image := e.c.Name("csi-vol-3f2a1c4e-8d7b-4e6f-9a0b-1c2d3e4f5a6b")
	importFilesystem(t, e.c, image, map[string]string{"hello": "from another driver\n"})
	handle := "v1:" + e.c.ClusterID + ":" + e.c.Pool + ":" + image
	static := map[string]string{"staticVolume": "true", "clusterID": e.c.ClusterID, "pool": e.c.Pool}
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	publish := func(id string, volCtx map[string]string) error {
		_, err := e.cc.ControllerPublishVolume(harness.Ctx(t), &csi.ControllerPublishVolumeRequest{
			VolumeId: id, NodeId: "node-a", VolumeCapability: rwo, VolumeContext: volCtx, Secrets: e.c.Secrets()})
		return err
	}

	// What an admin may get wrong, each answered with what to write.
	err := publish(handle, map[string]string{"clusterID": e.c.ClusterID, "pool": e.c.Pool})
	wantCode(t, err, codes.NotFound, "an image not created by the driver, without staticVolume")
	if err == nil || !strings.Contains(err.Error(), "staticVolume") {
		t.Errorf("the refusal does not name staticVolume: %v", err)
	}
	err = publish(image, static)
	wantCode(t, err, codes.InvalidArgument, "a bare image name as volumeHandle")
	if err == nil || !strings.Contains(err.Error(), handle) {
		t.Errorf("the refusal does not give the handle to write (%s): %v", handle, err)
	}
	wrongPool := map[string]string{"staticVolume": "true", "clusterID": e.c.ClusterID, "pool": "other"}
	wantCode(t, publish(handle, wrongPool), codes.InvalidArgument, "volumeAttributes naming another pool than the handle")
	wantCode(t, publish(handle, map[string]string{"staticVolume": "yes", "clusterID": e.c.ClusterID, "pool": e.c.Pool}), codes.InvalidArgument, "staticVolume: yes")
	missing := "v1:" + e.c.ClusterID + ":" + e.c.Pool + ":no-such-image"
	wantCode(t, publish(missing, static), codes.NotFound, "a static volume whose image does not exist")
	if len(e.publishedNodes(t, handle)) != 0 {
		t.Fatal("a refused publish left an attachment record")
	}

	// Attached, staged: the data is there, nothing was formatted.
	harness.Must(t, publish(handle, static), "publish the static volume")
	if got := e.publishedNodes(t, handle); len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("published nodes %v, want [node-a]", got)
	}
	vol := &csi.Volume{VolumeId: handle, VolumeContext: static}
	staging, err := os.MkdirTemp("", "rbdcsi-static-")
	harness.Must(t, err, "staging dir")
	defer os.Remove(staging) // empty once unstaged; never RemoveAll a possible mount
	harness.Must(t, e.stage(t, "node-a", vol, staging), "stage the static volume")
	data, err := os.ReadFile(filepath.Join(staging, "hello"))
	if err != nil || string(data) != "from another driver\n" {
		t.Errorf("staged static volume: hello = %q, %v; want the data it held", data, err)
	}
	e.unstage(t, "node-a", vol, staging)

	// Expanded like our own volumes.
	resp, err := e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: handle, CapacityRange: &csi.CapacityRange{RequiredBytes: 128 * mib}, VolumeCapability: rwo, Secrets: e.c.Secrets()})
	harness.Must(t, err, "expand the static volume")
	if resp.CapacityBytes != 128*mib || !resp.NodeExpansionRequired {
		t.Errorf("expand: %d bytes, node expansion %v", resp.CapacityBytes, resp.NodeExpansionRequired)
	}
	info, err := e.c.RBD(append([]string{"info", "--pool", e.c.Pool, image}, e.c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd info")
	if !strings.Contains(info, "size 128 MiB") {
		t.Errorf("after expand, rbd info says: %s", info)
	}

	// Snapshots, restores and clones of a static volume hold its data.
	snap, err := e.snapshot(t, "static-snap", handle)
	harness.Must(t, err, "snapshot of the static volume")
	restored, err := e.createFrom(t, "static-restored", 128*mib, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore the static volume's snapshot")
	clone, err := e.createFrom(t, "static-clone", 128*mib, fromVolume(handle))
	harness.Must(t, err, "clone the static volume")
	for _, v := range []*csi.Volume{restored, clone} {
		harness.Must(t, e.publish(t, v.VolumeId, "node-a", rwo, false), "publish %s", v.VolumeId)
		harness.Must(t, e.stage(t, "node-a", v, staging), "stage %s", v.VolumeId)
		if data, err := os.ReadFile(filepath.Join(staging, "hello")); err != nil || string(data) != "from another driver\n" {
			t.Errorf("%s: hello = %q, %v; want the static volume's data", v.VolumeId, data, err)
		}
		e.unstage(t, "node-a", v, staging)
		e.unpublish(t, v.VolumeId, "node-a")
		e.delete(t, v.VolumeId)
	}
	e.deleteSnapshot(t, snap.SnapshotId)

	// Detached; DeleteVolume never removes an image the driver did not make.
	e.unpublish(t, handle, "node-a")
	if got := e.publishedNodes(t, handle); len(got) != 0 {
		t.Errorf("after unpublish, published nodes %v", got)
	}
	_, err = e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: handle, Secrets: e.c.Secrets()})
	harness.Must(t, err, "DeleteVolume of a static volume")
	if _, err := e.c.RBD(append([]string{"info", "--pool", e.c.Pool, image}, e.c.NamespaceArgs()...)...); err != nil {
		t.Errorf("DeleteVolume removed an image the driver did not create: %v", err)
	}
}

// A static volume whose image lacks layering can be snapshotted, but a
// restore or clone of it is refused with the reason, and leaves nothing.
func TestStaticVolumeWithoutLayering(t *testing.T) {
	e := setup(t)
	image := e.c.Name("legacy-no-layering")
	_, err := e.c.RBD(append([]string{"create", "--size", "8M", "--image-feature", "exclusive-lock", "--pool", e.c.Pool, image}, e.c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd create")
	t.Cleanup(func() {
		if _, err := e.c.RBD(append([]string{"rm", "--pool", e.c.Pool, image}, e.c.NamespaceArgs()...)...); err != nil {
			t.Errorf("removing the static image (a snapshot left on it?): %v", err)
		}
	})
	handle := "v1:" + e.c.ClusterID + ":" + e.c.Pool + ":" + image
	snap, err := e.snapshot(t, "nolayer-snap", handle)
	harness.Must(t, err, "snapshot")
	_, err = e.createFrom(t, "nolayer-restored", 8*mib, fromSnapshot(snap.SnapshotId))
	wantCode(t, err, codes.FailedPrecondition, "restoring a snapshot of an image without layering")
	if err == nil || !strings.Contains(err.Error(), "layering") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	_, err = e.createFrom(t, "nolayer-clone", 8*mib, fromVolume(handle))
	wantCode(t, err, codes.FailedPrecondition, "cloning an image without layering")
	e.deleteSnapshot(t, snap.SnapshotId)
}
