package contract

import (
	"testing"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

// The backend tells its own watches from other clients' by its
// connections' addresses (rados_getaddrs): a connection's watch on an
// image must be listed under an address that names that connection, and
// another connection's must not, or the controller would blocklist
// itself when it fences a node.
func TestOwnWatchIsKnownByAddress(t *testing.T) {
	c := harness.LoadCluster(t)
	image := "contract-ownwatch"
	out, err := c.RBD(append([]string{"create", "--size", "1M", c.Pool + "/" + image}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd create: %s", out)
	defer func() {
		if out, err := c.RBD(append([]string{"rm", c.Pool + "/" + image}, c.NamespaceArgs()...)...); err != nil {
			t.Errorf("rbd rm: %v: %s", err, out)
		}
	}()
	conn, other := connect(t, c), connect(t, c)
	ioctx, err := conn.OpenIOContext(c.Pool)
	harness.Must(t, err, "pool %s", c.Pool)
	defer ioctx.Destroy()
	ioctx.SetNamespace(c.Namespace)

	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot) // read-write: a watch
	harness.Must(t, err, "open %s", image)
	defer img.Close()
	ws, err := img.ListWatchers()
	harness.Must(t, err, "list watchers")
	if len(ws) != 1 {
		t.Fatalf("watchers %+v, want the one connection's", ws)
	}
	mine, err := conn.GetAddrs()
	harness.Must(t, err, "rados_getaddrs")
	theirs, err := other.GetAddrs()
	harness.Must(t, err, "rados_getaddrs of the other connection")
	if !ceph.IsClient(mine, ws[0].Addr) {
		t.Errorf("the watch at %q is not known as the connection's own (rados_getaddrs %q)", ws[0].Addr, mine)
	}
	if ceph.IsClient(theirs, ws[0].Addr) {
		t.Errorf("the watch at %q is taken for another connection's (rados_getaddrs %q)", ws[0].Addr, theirs)
	}
}

// connect is a connection of its own as the CSI user, as the backend
// makes them.
func connect(t *testing.T, c harness.Cluster) *rados.Conn {
	t.Helper()
	conn, err := rados.NewConnWithUser(c.CSIUser)
	harness.Must(t, err, "rados connection")
	t.Cleanup(conn.Shutdown)
	for k, v := range map[string]string{"mon_host": c.MonHost, "key": c.CSIKey, "keyring": "/dev/null"} {
		harness.Must(t, conn.SetConfigOption(k, v), "setting %s", k)
	}
	harness.Must(t, conn.Connect(), "connecting as %s", c.CSIUser)
	return conn
}
