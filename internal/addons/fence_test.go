package addons_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/csi-addons/spec/lib/go/fence"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

func cidrs(ss ...string) []*fence.CIDR {
	var out []*fence.CIDR
	for _, s := range ss {
		out = append(out, &fence.CIDR{Cidr: s})
	}
	return out
}

func fenceService(t *testing.T) (*addons.Fence, *fake.Ceph) {
	c := fake.New(fake.Options{})
	own := cluster.Credentials{ID: "csi", Key: key}
	return addons.New(addons.Options{
		Fencer: c, Credentials: &own,
		Clusters: cluster.NewStaticMap([]cluster.Cluster{{ClusterID: clusterID, Monitors: []string{"127.0.0.1:3300"}}}),
	}).Fence(), c
}

var fenceParams = map[string]string{"clusterID": clusterID}

// Fences go in and out by host or block, repeated calls change nothing,
// and the list shows what is fenced; GetFenceClients names the cluster
// and the plugin's own address. e2e/addons proves it on real Ceph.
func TestNetworkFence(t *testing.T) {
	f, c := fenceService(t)
	list := func() []string {
		t.Helper()
		resp, err := f.ListClusterFence(ctx(t), &fence.ListClusterFenceRequest{Parameters: fenceParams})
		must(t, err, "ListClusterFence")
		var out []string
		for _, c := range resp.Cidrs {
			out = append(out, c.Cidr)
		}
		return out
	}
	for range 2 {
		_, err := f.FenceClusterNetwork(ctx(t), &fence.FenceClusterNetworkRequest{Parameters: fenceParams, Secrets: secrets(), Cidrs: cidrs("192.0.2.10/32", "198.51.100.0/24", "2001:db8::7/128", "192.0.2.10/32")})
		must(t, err, "FenceClusterNetwork")
	}
	if got, want := list(), []string{"192.0.2.10/32", "198.51.100.0/24", "2001:db8::7/128"}; !slices.Equal(got, want) {
		t.Fatalf("fenced %v, want %v (blocklist %v)", got, want, c.Blocklisted())
	}
	for range 2 {
		_, err := f.UnfenceClusterNetwork(ctx(t), &fence.UnfenceClusterNetworkRequest{Parameters: fenceParams, Secrets: secrets(), Cidrs: cidrs("198.51.100.0/24", "2001:db8::7/128")})
		must(t, err, "UnfenceClusterNetwork")
	}
	if got := list(); !slices.Equal(got, []string{"192.0.2.10/32"}) {
		t.Fatalf("after the unfence: %v", got)
	}
	clients, err := f.GetFenceClients(ctx(t), &fence.GetFenceClientsRequest{Parameters: fenceParams})
	must(t, err, "GetFenceClients")
	if len(clients.Clients) != 1 || clients.Clients[0].Id != fake.FenceID || len(clients.Clients[0].Addresses) != 1 || clients.Clients[0].Addresses[0].Cidr != "127.0.0.1/32" {
		t.Fatalf("GetFenceClients = %v", clients)
	}
}

// Every bad input is refused with InvalidArgument and a message that
// names the fault, and nothing is fenced.
func TestNetworkFenceRefusals(t *testing.T) {
	f, c := fenceService(t)
	for _, tc := range []struct {
		what    string
		params  map[string]string
		secrets map[string]string
		cidrs   []string
		says    string
	}{
		{"no cidrs", fenceParams, secrets(), nil, "cidrs is required"},
		{"no clusterID", map[string]string{}, secrets(), []string{"192.0.2.10/32"}, "clusterID is required"},
		{"an unknown cluster", map[string]string{"clusterID": "elsewhere"}, secrets(), []string{"192.0.2.10/32"}, "elsewhere"},
		{"an unknown parameter", map[string]string{"clusterID": clusterID, "pool": "rbd"}, secrets(), []string{"192.0.2.10/32"}, "unknown parameters"},
		{"no secrets", fenceParams, nil, []string{"192.0.2.10/32"}, "userID"},
		{"a bare address", fenceParams, secrets(), []string{"192.0.2.10"}, "192.0.2.10/32"},
		{"garbage", fenceParams, secrets(), []string{"10.0.0.0/33"}, "not a CIDR block"},
		{"host bits", fenceParams, secrets(), []string{"192.0.2.10/24"}, "192.0.2.0/24"},
		{"everything", fenceParams, secrets(), []string{"0.0.0.0/0"}, "every client"},
		{"everything, IPv6", fenceParams, secrets(), []string{"::/0"}, "every client"},
		{"a /8", fenceParams, secrets(), []string{"10.0.0.0/8"}, "wider than /16"},
		{"a /32 of IPv6", fenceParams, secrets(), []string{"2001:db8::/32"}, "wider than /48"},
		{"multicast", fenceParams, secrets(), []string{"224.0.0.0/24"}, "multicast"},
		{"IPv4 in IPv6 form", fenceParams, secrets(), []string{"::ffff:192.0.2.10/128"}, "192.0.2.10/32"},
		{"the plugin's own address", fenceParams, secrets(), []string{"192.0.2.10/32", "127.0.0.0/24"}, "bar the plugin itself"},
		{"a good block beside a bad one", fenceParams, secrets(), []string{"192.0.2.10/32", "0.0.0.0/0"}, "cidrs[1]"},
	} {
		_, err := f.FenceClusterNetwork(ctx(t), &fence.FenceClusterNetworkRequest{Parameters: tc.params, Secrets: tc.secrets, Cidrs: cidrs(tc.cidrs...)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.what, err, tc.says)
		}
		if bl := c.Blocklisted(); len(bl) > 0 {
			t.Fatalf("%s: fenced %v", tc.what, bl)
		}
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "192.0.2.10/32"
	}
	_, err := f.FenceClusterNetwork(ctx(t), &fence.FenceClusterNetworkRequest{Parameters: fenceParams, Secrets: secrets(), Cidrs: cidrs(many...)})
	wantCode(t, err, codes.InvalidArgument, "65 cidrs")
	_, err = f.UnfenceClusterNetwork(ctx(t), &fence.UnfenceClusterNetworkRequest{Parameters: fenceParams, Secrets: secrets(), Cidrs: cidrs("0.0.0.0/0")})
	wantCode(t, err, codes.InvalidArgument, "Unfence of everything")
	_, err = f.GetFenceClients(ctx(t), &fence.GetFenceClientsRequest{})
	wantCode(t, err, codes.InvalidArgument, "GetFenceClients without clusterID")
}
