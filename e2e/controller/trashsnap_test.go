package controller

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// RBD removes a deleted snapshot (kept in its trash namespace) when its
// last clone detaches, but two clones detaching at once can both see the
// other still there, and the snapshot stays with no clone at all (seen
// once under make e2e). These tests make that state on purpose and show
// the data it pins does not stay forever.

// detachBehindRBD unlinks a clone from its parent's snapshot the way a
// detach that lost that race does: the parent no longer lists the clone,
// the clone no longer names a parent, and the snapshot is left as it was.
// It runs the two rbd object-class methods librbd's own detach runs.
func (e env) detachBehindRBD(t *testing.T, parent, child string) {
	t.Helper()
	parentID, childID := e.imageID(t, parent), e.imageID(t, child)
	snapID := e.trashedSnapID(t, parent)

	conn, err := rados.NewConnWithUser("admin")
	harness.Must(t, err, "rados connection")
	harness.Must(t, conn.ReadConfigFile(e.c.Conf), "reading %s", e.c.Conf)
	harness.Must(t, conn.Connect(), "connecting to the cluster")
	defer conn.Shutdown()
	poolID, err := conn.GetPoolByName(e.c.Pool)
	harness.Must(t, err, "pool id")
	ioctx, err := conn.OpenIOContext(e.c.Pool)
	harness.Must(t, err, "pool %s", e.c.Pool)
	defer ioctx.Destroy()

	// child_detach takes the snapshot ID and the child's spec, in Ceph's
	// encoding: a versioned struct {pool id, image id, namespace}.
	spec := binary.LittleEndian.AppendUint64(nil, uint64(poolID))
	spec = appendString(spec, childID)
	spec = appendString(spec, "")
	in := binary.LittleEndian.AppendUint64(nil, snapID)
	in = append(in, 2, 1) // struct version, oldest compatible version
	in = binary.LittleEndian.AppendUint32(in, uint32(len(spec)))
	in = append(in, spec...)
	e.execRBDClass(t, ioctx, "rbd_header."+parentID, "child_detach", in)
	e.execRBDClass(t, ioctx, "rbd_header."+childID, "remove_parent", nil)
}

func appendString(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint32(b, uint32(len(s))), s...)
}

func (e env) execRBDClass(t *testing.T, ioctx *rados.IOContext, object, method string, in []byte) {
	t.Helper()
	op := rados.CreateWriteOp()
	defer op.Release()
	op.Exec("rbd", method, in)
	harness.Must(t, op.Operate(ioctx, object, rados.OperationNoFlag), "rbd.%s on %s", method, object)
}

func (e env) imageID(t *testing.T, image string) string {
	t.Helper()
	out, err := e.c.RBD("info", "--format", "json", e.c.Pool+"/"+image)
	harness.Must(t, err, "rbd info: %s", out)
	var info struct {
		ID string `json:"id"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &info), "rbd info json")
	return info.ID
}

// trashedSnapID is the ID of the image's one snapshot in the trash namespace.
func (e env) trashedSnapID(t *testing.T, image string) uint64 {
	t.Helper()
	out, err := e.c.RBD("snap", "ls", "--all", "--format", "json", e.c.Pool+"/"+image)
	harness.Must(t, err, "rbd snap ls: %s", out)
	var snaps []struct {
		ID        uint64 `json:"id"`
		Namespace struct {
			Type string `json:"type"`
		} `json:"namespace"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &snaps), "rbd snap ls json")
	for _, s := range snaps {
		if s.Namespace.Type == "trash" {
			return s.ID
		}
	}
	t.Fatalf("%s has no snapshot in the trash namespace: %s", image, out)
	return 0
}

// A volume whose deleted snapshot no clone needs any more is deleted
// outright, not kept hidden for nothing.
func TestDeleteVolumeWithCloneLessTrashedSnapshot(t *testing.T) {
	e := setup(t)
	src, snap, clone := e.restoredSnapshot(t, "trash")
	e.deleteSnapshot(t, snap.SnapshotId) // trashed: the clone needs it
	e.detachBehindRBD(t, imageOf(t, src.VolumeId), imageOf(t, clone.VolumeId))

	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, src.VolumeId)
	if hidden := e.hiddenImages(t); len(hidden) != 0 {
		t.Fatalf("the volume was kept for a snapshot nothing needs: %v", hidden)
	}
	unswept.delete(t, clone.VolumeId)
	e.expectPoolEmpty(t)
}

// A deleted volume kept for its deleted snapshot's clone, whose last clone
// went without taking the snapshot along: no request will reclaim it, the
// sweep does.
func TestSweepReclaimsHiddenImageWithCloneLessTrashedSnapshot(t *testing.T) {
	e := setup(t)
	src, snap, clone := e.restoredSnapshot(t, "trash-hidden")
	e.delete(t, src.VolumeId)            // hidden: the snapshot needs it
	e.deleteSnapshot(t, snap.SnapshotId) // trashed: the clone needs it
	hidden := e.hiddenImages(t)
	if len(hidden) != 1 {
		t.Fatalf("the deleted source is not kept for its clone: %v", e.c.Images(t))
	}
	e.detachBehindRBD(t, hidden[0], imageOf(t, clone.VolumeId))

	unswept := startController(t, e.c, "--reclaim-sweep-interval", "0")
	unswept.delete(t, clone.VolumeId)
	e.expectHiddenStays(t)

	swept := startController(t, e.c)
	swept.delete(t, clone.VolumeId)
	swept.waitSwept(t)
}
