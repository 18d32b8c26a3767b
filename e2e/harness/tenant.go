package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// InNamespace writes a cluster map with one more entry, clusterID ns, for
// the same monitors and rbd.radosNamespace ns, and returns the Cluster of
// that entry (the namespace itself is not made: see Tenant).
func (c Cluster) InNamespace(t *testing.T, ns string) Cluster {
	t.Helper()
	nc := c
	nc.ClusterID, nc.Namespace = ns, ns
	nc.ConfigFile = filepath.Join(t.TempDir(), "cluster-config.json")
	data, err := os.ReadFile(c.ConfigFile)
	Must(t, err, "reading the cluster map")
	var entries []map[string]any
	Must(t, json.Unmarshal(data, &entries), "decoding the cluster map")
	entries = append(entries, map[string]any{
		"clusterID": ns, "monitors": strings.Split(c.MonHost, ","), "rbd": map[string]string{"radosNamespace": ns},
	})
	data, err = json.Marshal(entries)
	Must(t, err, "encoding the cluster map")
	Must(t, os.WriteFile(nc.ConfigFile, data, 0o644), "writing the cluster map")
	return nc
}

// Tenant makes a RADOS namespace ns in the test pool, a Ceph user that may
// use that namespace only, and a cluster map that adds the entry
// clusterID ns (the same monitors, rbd.radosNamespace ns). The returned
// Cluster speaks for the tenant: its Params, Secrets and ConfigFile are the
// tenant's, and its inspection helpers look into the namespace. When the
// test ends (after the cleanups registered later) it fails the test if
// anything is left in the namespace, then removes the namespace and user.
func (c Cluster) Tenant(t *testing.T, ns string) Cluster {
	t.Helper()
	out, err := c.RBD("namespace", "create", "--pool", c.Pool, "--namespace", ns)
	Must(t, err, "rbd namespace create: %s", out)
	key := c.NewUser(t, ns, "mon", "profile rbd", "osd", "profile rbd pool="+c.Pool+" namespace="+ns)

	tc := c.InNamespace(t, ns)
	tc.CSIUser, tc.CSIKey = ns, key

	t.Cleanup(func() {
		if left := tc.PoolLeaks(); len(left) > 0 {
			t.Errorf("left in namespace %s of pool %s:\n  %s", ns, c.Pool, strings.Join(left, "\n  "))
		}
		// The index objects may stay, empty (PoolLeaks allows them); they
		// go with the namespace here.
		for _, obj := range []string{"rbdcsi.nodes", "rbdcsi.snapclaims", "rbdcsi.statictmp"} {
			_, _ = c.Rados("-p", c.Pool, "--namespace", ns, "rm", c.Object(obj))
		}
		if out, err := c.RBD("namespace", "remove", "--pool", c.Pool, "--namespace", ns); err != nil {
			t.Errorf("rbd namespace remove: %v: %s", err, out)
		}
	})
	return tc
}

// NewUser makes the Ceph user client.<id> with caps (as `ceph auth
// get-or-create` takes them) and returns its key; the user is removed
// when the test ends, after the cleanups registered later.
func (c Cluster) NewUser(t testing.TB, id string, caps ...string) string {
	t.Helper()
	entity := "client." + id
	out, err := c.Ceph(append([]string{"auth", "get-or-create", entity}, caps...)...)
	Must(t, err, "ceph auth get-or-create %s: %s", entity, out)
	t.Cleanup(func() {
		if out, err := c.Ceph("auth", "rm", entity); err != nil {
			t.Errorf("ceph auth rm %s: %v: %s", entity, err, out)
		}
	})
	out, err = c.Ceph("auth", "print-key", entity)
	Must(t, err, "ceph auth print-key %s: %s", entity, out)
	fields := strings.Fields(out) // the key is the last word (warnings may precede it)
	if len(fields) == 0 {
		t.Fatalf("ceph auth print-key %s printed nothing", entity)
	}
	return fields[len(fields)-1]
}

// NodeUserCaps are the node user's caps as docs/install.md#3-the-ceph-users gives
// them (cluster.NodeMon, cluster.NodeOSD), for c's pool, data pool and
// namespace, with the node registry object in c's pool.
func (c Cluster) NodeUserCaps() []string {
	var data []string
	if c.DataPool != "" {
		data = append(data, c.DataPool)
	}
	return []string{"mon", cluster.NodeMon, "osd", cluster.NodeOSD(c.Namespace, c.Pool, "rbdcsi.nodes", []string{c.Pool}, data)}
}

// NodeSecretDir makes a node user with NodeUserCaps, named after base,
// removed when the test ends, and writes its credentials as a mounted
// Secret holds them (--node-secret-dir).
func (c Cluster) NodeSecretDir(t testing.TB, base string) (dir, user, key string) {
	t.Helper()
	user = c.Name(base)
	key = c.NewUser(t, user, c.NodeUserCaps()...)
	dir = t.TempDir()
	for name, v := range map[string]string{"userID": user, "userKey": key} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, user, key
}
