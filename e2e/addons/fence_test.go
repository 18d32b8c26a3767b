package addons

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csi-addons/spec/lib/go/fence"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

func cidrs(ss ...string) []*fence.CIDR {
	var out []*fence.CIDR
	for _, s := range ss {
		out = append(out, &fence.CIDR{Cidr: s})
	}
	return out
}

// blocklist is the monitors' blocklist as admin reads it: address
// entries and ranges.
func blocklist(t *testing.T, c harness.Cluster) (addrs, ranges []string) {
	t.Helper()
	out, err := c.Ceph("osd", "blocklist", "ls", "--format", "json")
	harness.Must(t, err, "ceph osd blocklist ls")
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var list []struct {
			Addr  string `json:"addr"`
			Range string `json:"range"`
		}
		if err := dec.Decode(&list); err != nil {
			return addrs, ranges
		}
		for _, l := range list {
			if l.Range != "" {
				ranges = append(ranges, l.Range)
			} else {
				addrs = append(addrs, l.Addr)
			}
		}
	}
}

// A NetworkFence bars a host with an address entry and a wider block
// with a range entry, as the monitors list them; fencing again changes
// nothing, the CSI user (mon 'profile rbd') may fence but not lift, the
// admin lifts, and ListClusterFence shows what is fenced.
// GetFenceClients names the cluster and the plugin's address.
func TestNetworkFence(t *testing.T) {
	e := start(t, "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, harness.LoadCluster(t)))
	params := map[string]string{"clusterID": e.c.ClusterID}
	blocks := cidrs("127.0.0.77/32", "127.0.0.64/28")
	t.Cleanup(func() {
		_, _ = e.c.Ceph("osd", "blocklist", "rm", "127.0.0.77:0/0")
		_, _ = e.c.Ceph("osd", "blocklist", "range", "rm", "127.0.0.64/28")
	})
	for range 2 {
		_, err := e.fence.FenceClusterNetwork(harness.Ctx(t), &fence.FenceClusterNetworkRequest{Parameters: params, Secrets: e.c.Secrets(), Cidrs: blocks})
		harness.Must(t, err, "FenceClusterNetwork as %s", e.c.CSIUser)
	}
	addrs, ranges := blocklist(t, e.c)
	if !slices.Contains(addrs, "127.0.0.77:0/0") || !slices.Contains(ranges, "127.0.0.64:0/28") {
		t.Fatalf("the monitors list %v and ranges %v; want 127.0.0.77:0/0 and the range 127.0.0.64:0/28", addrs, ranges)
	}
	list, err := e.fence.ListClusterFence(harness.Ctx(t), &fence.ListClusterFenceRequest{Parameters: params})
	harness.Must(t, err, "ListClusterFence")
	var listed []string
	for _, c := range list.Cidrs {
		listed = append(listed, c.Cidr)
	}
	if !slices.Equal(listed, []string{"127.0.0.64/28", "127.0.0.77/32"}) {
		t.Errorf("ListClusterFence = %v", listed)
	}

	_, err = e.fence.UnfenceClusterNetwork(harness.Ctx(t), &fence.UnfenceClusterNetworkRequest{Parameters: params, Secrets: e.c.Secrets(), Cidrs: blocks})
	wantCode(t, err, codes.PermissionDenied, "UnfenceClusterNetwork as the CSI user")
	if !strings.Contains(err.Error(), "blocklistop=rm") {
		t.Errorf("the refusal does not name the cap the user needs: %v", err)
	}
	for range 2 {
		_, err = e.fence.UnfenceClusterNetwork(harness.Ctx(t), &fence.UnfenceClusterNetworkRequest{Parameters: params, Secrets: e.adminSecrets(), Cidrs: blocks})
		harness.Must(t, err, "UnfenceClusterNetwork as admin")
	}
	if addrs, ranges := blocklist(t, e.c); slices.Contains(addrs, "127.0.0.77:0/0") || len(ranges) > 0 {
		t.Fatalf("after the unfence the monitors still list %v and ranges %v", addrs, ranges)
	}

	clients, err := e.fence.GetFenceClients(harness.Ctx(t), &fence.GetFenceClientsRequest{Parameters: params})
	harness.Must(t, err, "GetFenceClients")
	if len(clients.Clients) != 1 || clients.Clients[0].Id != e.c.FSID || len(clients.Clients[0].Addresses) != 1 || clients.Clients[0].Addresses[0].Cidr != "127.0.0.1/32" {
		t.Errorf("GetFenceClients = %v; want fsid %s at 127.0.0.1/32", clients, e.c.FSID)
	}

	for _, c := range []struct {
		what  string
		cidrs []string
		says  string
	}{
		{"the plugin's own address", []string{"127.0.0.1/32"}, "bar the plugin itself"},
		{"a block holding the plugin", []string{"127.0.0.0/24"}, "bar the plugin itself"},
		{"everything", []string{"0.0.0.0/0"}, "every client"},
		{"a bare address", []string{"127.0.0.77"}, "127.0.0.77/32"},
	} {
		_, err := e.fence.FenceClusterNetwork(harness.Ctx(t), &fence.FenceClusterNetworkRequest{Parameters: params, Secrets: e.c.Secrets(), Cidrs: cidrs(c.cidrs...)})
		wantCode(t, err, codes.InvalidArgument, c.what)
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want it to say %q", c.what, err, c.says)
		}
	}
	if addrs, ranges := blocklist(t, e.c); len(ranges) > 0 || slices.ContainsFunc(addrs, func(a string) bool { return strings.HasSuffix(a, ":0/0") }) {
		t.Fatalf("a refused call fenced: %v %v", addrs, ranges)
	}
}

// The entries bar real clients: a fence of this host's loopback address,
// as an address entry and as a range, makes a write from it fail at the
// OSDs until it is lifted. It is made through the backend itself, since
// the plugin refuses to fence the address it reaches the cluster from,
// which every client on this machine shares. The cluster's daemons share
// it too, but what they send each other (peering, replication, the
// monitors' traffic) is no client I/O, and is not barred; the fence lasts
// no longer than the one write.
func TestNetworkFenceBarsClients(t *testing.T) {
	c := harness.LoadCluster(t)
	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	backend := ceph.NewBackend(conns, ceph.BackendOptions{})
	admin := cluster.Credentials{ID: "admin", Key: c.AdminKey}
	file := filepath.Join(t.TempDir(), "obj")
	harness.Must(t, os.WriteFile(file, []byte("fenced?"), 0o600), "object data")
	put := func() error {
		_, err := c.Rados("--pool", c.Pool, "put", "rbdcsi-fence-probe", file)
		return err
	}
	t.Cleanup(func() {
		_, _ = c.Ceph("osd", "blocklist", "rm", "127.0.0.1:0/0")
		_, _ = c.Ceph("osd", "blocklist", "range", "rm", "127.0.0.0/28")
		_, _ = c.Rados("--pool", c.Pool, "rm", "rbdcsi-fence-probe")
	})
	for _, block := range []string{"127.0.0.1/32", "127.0.0.0/28"} {
		p := netip.MustParsePrefix(block)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		harness.Must(t, backend.BlocklistNetwork(ctx, c.MonHost, admin, p, time.Hour), "fencing %s", block)
		err := put()
		if err == nil || !strings.Contains(err.Error(), "108") {
			t.Errorf("a write from 127.0.0.1 with %s fenced: %v; want it refused (108, blocklisted)", block, err)
		}
		harness.Must(t, backend.UnblocklistNetwork(ctx, c.MonHost, admin, p), "lifting %s", block)
		cancel()
		eventually(t, "a write to succeed after lifting "+block, func() bool { return put() == nil })
	}
}
