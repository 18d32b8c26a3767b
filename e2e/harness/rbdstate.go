package harness

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/ceph/go-ceph/rados"
)

// The helpers below make, in the real cluster, the states that crashes,
// races and other clients leave, for tests that show the driver copes.

// AdminIoctx opens the test pool, in the cluster's RADOS namespace, as
// admin on a connection of its own (librbd does not count a client's own
// watch against it, so a second client must be a second connection).
func (c Cluster) AdminIoctx(t testing.TB) (ioctx *rados.IOContext, close func()) {
	t.Helper()
	conn, err := rados.NewConnWithUser("admin")
	Must(t, err, "rados connection")
	if err := conn.ReadConfigFile(c.Conf); err != nil {
		conn.Shutdown()
		t.Fatalf("reading %s: %v", c.Conf, err)
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		t.Fatalf("connecting to the cluster: %v", err)
	}
	ioctx, err = conn.OpenIOContext(c.Pool)
	if err != nil {
		conn.Shutdown()
		t.Fatalf("pool %s: %v", c.Pool, err)
	}
	ioctx.SetNamespace(c.Namespace)
	return ioctx, func() { ioctx.Destroy(); conn.Shutdown() }
}

// ImageID is the RBD ID of an image of the test pool.
func (c Cluster) ImageID(t testing.TB, image string) string {
	t.Helper()
	out, err := c.RBD(append([]string{"info", "--format", "json", c.Pool + "/" + image}, c.NamespaceArgs()...)...)
	Must(t, err, "rbd info: %s", out)
	var info struct {
		ID string `json:"id"`
	}
	Must(t, json.Unmarshal([]byte(out), &info), "rbd info json")
	return info.ID
}

// RemoveHeader leaves an image as an interrupted removal does: listed in
// the pool directory, without its header object.
func (c Cluster) RemoveHeader(t testing.TB, image string) {
	t.Helper()
	ioctx, done := c.AdminIoctx(t)
	defer done()
	Must(t, ioctx.Delete("rbd_header."+c.ImageID(t, image)), "removing the header of %s", image)
}

// trashedSnapID is the ID of the image's one snapshot in the trash namespace.
func (c Cluster) trashedSnapID(t testing.TB, image string) uint64 {
	t.Helper()
	out, err := c.RBD(append([]string{"snap", "ls", "--all", "--format", "json", c.Pool + "/" + image}, c.NamespaceArgs()...)...)
	Must(t, err, "rbd snap ls: %s", out)
	var snaps []struct {
		ID        uint64 `json:"id"`
		Namespace struct {
			Type string `json:"type"`
		} `json:"namespace"`
	}
	Must(t, json.Unmarshal([]byte(out), &snaps), "rbd snap ls json")
	for _, s := range snaps {
		if s.Namespace.Type == "trash" {
			return s.ID
		}
	}
	t.Fatalf("%s has no snapshot in the trash namespace: %s", image, out)
	return 0
}

// DetachBehindRBD unlinks a clone from its parent's trashed snapshot the
// way a detach that lost a race with another does (seen once under make
// e2e): the parent no longer lists the clone, the clone no longer names a
// parent, and the snapshot is left as it was. It runs the two rbd
// object-class methods librbd's own detach runs.
func (c Cluster) DetachBehindRBD(t testing.TB, parent, child string) {
	t.Helper()
	parentID, childID := c.ImageID(t, parent), c.ImageID(t, child)
	snapID := c.trashedSnapID(t, parent)
	ioctx, done := c.AdminIoctx(t)
	defer done()

	// child_detach takes the snapshot ID and the child's spec, in Ceph's
	// encoding: a versioned struct {pool id, image id, namespace}.
	spec := binary.LittleEndian.AppendUint64(nil, uint64(ioctx.GetPoolID()))
	spec = appendString(spec, childID)
	spec = appendString(spec, c.Namespace)
	in := binary.LittleEndian.AppendUint64(nil, snapID)
	in = append(in, 2, 1) // struct version, oldest compatible version
	in = binary.LittleEndian.AppendUint32(in, uint32(len(spec)))
	in = append(in, spec...)
	execRBDClass(t, ioctx, "rbd_header."+parentID, "child_detach", in)
	execRBDClass(t, ioctx, "rbd_header."+childID, "remove_parent", nil)
}

func appendString(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint32(b, uint32(len(s))), s...)
}

func execRBDClass(t testing.TB, ioctx *rados.IOContext, object, method string, in []byte) {
	t.Helper()
	op := rados.CreateWriteOp()
	defer op.Release()
	op.Exec("rbd", method, in)
	Must(t, op.Operate(ioctx, object, rados.OperationNoFlag), "rbd.%s on %s", method, object)
}
