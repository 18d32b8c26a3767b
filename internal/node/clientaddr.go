package node

import (
	"context"
	"net/netip"
	"sync"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// ClientAddress tells the IP this node's Ceph clients reach a cluster
// from: the plugin's own connection's, as the monitors see it
// (internal/rbd/ceph). Every client on the node (krbd, rbd-nbd, rbd-fuse)
// learns the same IP from its own monitor session.
type ClientAddress interface {
	ClientAddress(ctx context.Context, monHost string, cred cluster.Credentials) (fsid string, addr netip.Addr, err error)
}

// AddressRegistry keeps each node's client address per cluster in the
// node registry (nodereg.Registry implements it, with the node user).
type AddressRegistry interface {
	SetClientIP(ctx context.Context, nodeID, clusterID string, ip netip.Addr) error
}

// recordedAddrs are the addresses this plugin recorded in the registry,
// by clusterID, so a stage writes only a change.
type recordedAddrs struct {
	mu sync.Mutex
	ip map[string]netip.Addr
}

func (r *recordedAddrs) has(clusterID string, ip netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ip[clusterID] == ip
}

func (r *recordedAddrs) set(clusterID string, ip netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ip == nil {
		r.ip = map[string]netip.Addr{}
	}
	r.ip[clusterID] = ip
}

// recordAddress records in the node registry the IP this node reaches the
// volume's cluster from, unless this plugin recorded that one already: a
// detach of a mirrored volume then fences only the watchers at that IP
// (and the lock holder), not the peer site's rbd-mirror
// (internal/controller/fence.go). It runs at every stage, so a node whose
// address changed records the new one at its next stage. A failure fails
// nothing: the controller, finding no address, fences every client, as it
// must when it cannot tell them apart; it is logged, since the peer's
// rbd-mirror is then fenced at a detach too.
func (n *Node) recordAddress(ctx context.Context, cl cluster.Cluster, cred cluster.Credentials) {
	if n.addrReg == nil || n.clientAddr == nil {
		return
	}
	_, ip, err := n.clientAddr.ClientAddress(ctx, cl.MonHost(), cred)
	if err == nil && n.addrs.has(cl.ClusterID, ip) {
		return
	}
	if err == nil {
		err = n.addrReg.SetClientIP(ctx, n.id, cl.ClusterID, ip)
	}
	if err != nil {
		klog.ErrorS(err, "recording this node's client address in the node registry failed; a detach of a mirrored volume from this node fences every client, the peer site's rbd-mirror too, until a stage records it",
			"node", n.id, "clusterID", cl.ClusterID)
		return
	}
	n.addrs.set(cl.ClusterID, ip)
	klog.V(2).InfoS("recorded this node's client address in the node registry", "node", n.id, "clusterID", cl.ClusterID, "address", ip)
}
