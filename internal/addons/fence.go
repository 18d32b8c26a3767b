package addons

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/csi-addons/spec/lib/go/fence"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Fence is the csi-addons NetworkFence service: a NetworkFence CR bars
// whole hosts or networks (a failed node's addresses) from a Ceph
// cluster's OSDs, through the same OSD blocklist the controller's
// force-detach fences add single client instances to. A host (/32,
// /128) is an address entry, which every release takes; a wider block
// is a range entry (Pacific 16.2.15's monitors take them; one that does
// not is found out and the call refused). Every call is idempotent.
type Fence struct {
	fence.UnimplementedFenceControllerServer

	o Options
}

// ParamClusterID names the cluster map entry of the cluster to fence in.
const ParamClusterID = "clusterID"

// fenceReservedPrefix marks the csi-addons controller's own keys (a
// NetworkFenceClass's secret name and namespace).
const fenceReservedPrefix = "csiaddons.openshift.io/"

// fenceExpiry is how long a fence lasts: until it is lifted, in effect.
// Ceph has no entry without an expiry; five years outlast any outage a
// fence is for.
const fenceExpiry = 5 * 365 * 24 * time.Hour

// maxCIDRs bounds one call: a node has a handful of addresses.
const maxCIDRs = 64

// Narrowest blocks a fence may be wider than: a wider one bars whole
// networks of hosts that have nothing to do with a failed node.
const (
	minBits4 = 16
	minBits6 = 48
)

// FenceClusterNetwork bars every client in the blocks from the cluster.
// All blocks are checked before any is fenced. A block that holds this
// plugin's own address is refused: the plugin would fence itself, and
// every later call of its own, the unfence's reads included, would fail
// at the OSDs.
func (f *Fence) FenceClusterNetwork(ctx context.Context, req *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	t, err := f.target(req.GetParameters(), req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	blocks, err := parseCIDRs(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	_, own, err := f.o.Fencer.ClientAddress(ctx, t.monHost, t.cred)
	if err != nil {
		return nil, fenceStatus(err)
	}
	for _, b := range blocks {
		if b.Contains(own) {
			return nil, status.Errorf(codes.InvalidArgument, "cidr %s holds %s, the address this plugin reaches cluster %s from: fencing it would bar the plugin itself", b, own, t.clusterID)
		}
	}
	for _, b := range blocks {
		if err := f.o.Fencer.BlocklistNetwork(ctx, t.monHost, t.cred, b, fenceExpiry); err != nil {
			return nil, fenceStatus(err)
		}
	}
	return &fence.FenceClusterNetworkResponse{}, nil
}

// UnfenceClusterNetwork lifts the fences of the blocks; a block that is
// not fenced is fine. Lifting needs a Ceph user allowed to remove
// blocklist entries, which `mon 'profile rbd'` is not.
func (f *Fence) UnfenceClusterNetwork(ctx context.Context, req *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	t, err := f.target(req.GetParameters(), req.GetSecrets(), false)
	if err != nil {
		return nil, err
	}
	blocks, err := parseCIDRs(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	for _, b := range blocks {
		if err := f.o.Fencer.UnblocklistNetwork(ctx, t.monHost, t.cred, b); err != nil {
			return nil, fenceStatus(err)
		}
	}
	return &fence.UnfenceClusterNetworkResponse{}, nil
}

// ListClusterFence lists the hosts and blocks fenced in the cluster,
// whoever fenced them; the entries of single client instances (the
// controller's force-detach fences, Ceph's own) are no network fences
// and are not listed.
func (f *Fence) ListClusterFence(ctx context.Context, req *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	t, err := f.target(req.GetParameters(), req.GetSecrets(), true)
	if err != nil {
		return nil, err
	}
	blocks, err := f.o.Fencer.BlocklistedNetworks(ctx, t.monHost, t.cred)
	if err != nil {
		return nil, fenceStatus(err)
	}
	resp := &fence.ListClusterFenceResponse{}
	for _, b := range blocks {
		resp.Cidrs = append(resp.Cidrs, &fence.CIDR{Cidr: b.String()})
	}
	return resp, nil
}

// GetFenceClients names what a fence of this plugin would take: the
// cluster (its fsid) and the address the plugin reaches it from, as a
// host block. A disaster-recovery orchestrator gathers these from each
// site's plugin, to fence one site's clients out of the other's cluster.
func (f *Fence) GetFenceClients(ctx context.Context, req *fence.GetFenceClientsRequest) (*fence.GetFenceClientsResponse, error) {
	t, err := f.target(req.GetParameters(), req.GetSecrets(), true)
	if err != nil {
		return nil, err
	}
	fsid, own, err := f.o.Fencer.ClientAddress(ctx, t.monHost, t.cred)
	if err != nil {
		return nil, fenceStatus(err)
	}
	return &fence.GetFenceClientsResponse{Clients: []*fence.ClientDetails{{
		Id:        fsid,
		Addresses: []*fence.CIDR{{Cidr: netip.PrefixFrom(own, own.BitLen()).String()}},
	}}}, nil
}

// fenceTarget is the cluster a fence call acts on, and as whom.
type fenceTarget struct {
	clusterID, monHost string
	cred               cluster.Credentials
}

// target checks a call's parameters and finds its cluster and
// credentials: the request's, or for a read without any, the driver's.
func (f *Fence) target(params, secrets map[string]string, read bool) (fenceTarget, error) {
	var unknown []string
	for k := range params {
		if k != ParamClusterID && !strings.HasPrefix(k, fenceReservedPrefix) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fenceTarget{}, status.Errorf(codes.InvalidArgument, "unknown parameters %q: this driver takes %s", unknown, ParamClusterID)
	}
	id := params[ParamClusterID]
	if id == "" {
		return fenceTarget{}, status.Errorf(codes.InvalidArgument, "parameter %s is required: it names the cluster map entry of the cluster to fence in", ParamClusterID)
	}
	entry, err := f.o.Clusters.Lookup(id)
	if err != nil {
		return fenceTarget{}, status.Errorf(codes.InvalidArgument, "parameter %s: %v", ParamClusterID, err)
	}
	t := fenceTarget{clusterID: id, monHost: entry.MonHost()}
	if len(secrets) == 0 && read && f.o.Credentials != nil {
		t.cred = *f.o.Credentials
		return t, nil
	}
	if t.cred, err = cluster.CredentialsFromSecrets(secrets); err != nil {
		return fenceTarget{}, status.Errorf(codes.InvalidArgument, "%v (the NetworkFence's secret names the Secret)", err)
	}
	return t, nil
}

// parseCIDRs checks every block of a call; each refusal says which one
// and why.
func parseCIDRs(cidrs []*fence.CIDR) ([]netip.Prefix, error) {
	switch {
	case len(cidrs) == 0:
		return nil, status.Error(codes.InvalidArgument, "cidrs is required: the blocks to fence, such as 192.0.2.10/32")
	case len(cidrs) > maxCIDRs:
		return nil, status.Errorf(codes.InvalidArgument, "%d cidrs in one call: at most %d", len(cidrs), maxCIDRs)
	}
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, c := range cidrs {
		p, err := parseCIDR(c.GetCidr())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "cidrs[%d]: %v", i, err)
		}
		if !containsPrefix(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseCIDR takes one block in CIDR notation, exactly: no bare address,
// no host bits beyond the prefix, no IPv4 in IPv6 form (Ceph sees IPv4
// clients as IPv4), and nothing that would bar every client or whole
// networks.
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			return netip.Prefix{}, fmt.Errorf("%q is an address, not a CIDR block: for that host alone, %s", s, netip.PrefixFrom(a, a.BitLen()))
		}
		return netip.Prefix{}, fmt.Errorf("%.60q is not a CIDR block (%v): want one such as 192.0.2.10/32 or 2001:db8::10/128", s, err)
	}
	a := p.Addr()
	switch {
	case a.Is4In6():
		return netip.Prefix{}, fmt.Errorf("%s is an IPv4 block in IPv6 form: write it as IPv4 (%s/%d)", p, a.Unmap(), p.Bits()-96)
	case p != p.Masked():
		return netip.Prefix{}, fmt.Errorf("%s has bits set beyond its prefix: the block is %s, the host alone %s", p, p.Masked(), netip.PrefixFrom(a, a.BitLen()))
	case p.Bits() == 0 || a.IsUnspecified():
		return netip.Prefix{}, fmt.Errorf("%s would fence every client of the cluster", p)
	case a.IsMulticast():
		return netip.Prefix{}, fmt.Errorf("%s is a multicast block, which no client has an address in", p)
	case a.Is4() && p.Bits() < minBits4, a.Is6() && p.Bits() < minBits6:
		least := minBits4
		if a.Is6() {
			least = minBits6
		}
		return netip.Prefix{}, fmt.Errorf("%s is wider than /%d: it would fence whole networks of hosts; fence the failed nodes' own addresses or blocks", p, least)
	}
	return p, nil
}

func containsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// fenceStatus is cephStatus for fences: a monitor that does not take a
// range makes the block the caller's to change (hosts one by one).
func fenceStatus(err error) error {
	return grpcerr.Ceph(grpcerr.Rule{Err: rbd.ErrNotSupported, Code: codes.InvalidArgument}).Status(err)
}
