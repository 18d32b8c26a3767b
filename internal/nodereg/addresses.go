package nodereg

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A node's client address: the IP its Ceph clients (krbd, rbd-nbd,
// rbd-fuse, the plugin's own librados) reach a cluster from. Each learns
// it from its monitor session, so the watchers of the node's mappings show
// that IP. The node records it at a stage; the controller reads it when it
// fences a mirrored image, to tell the node's clients from the peer site's
// rbd-mirror, which watches the primary image from another address. The
// keys outlive the plugin, as attachments do: the node's mappings do too.

func addrKey(nodeID, clusterID string) string { return addrPrefix + nodeID + "/" + clusterID }

// SetClientIP records ip as the address node nodeID reaches the cluster
// clusterID from (the node calls it, with its own user).
func (r *Registry) SetClientIP(ctx context.Context, nodeID, clusterID string, ip netip.Addr) error {
	if err := checkAddrKey(nodeID, clusterID); err != nil {
		return err
	}
	if !ip.IsValid() {
		return fmt.Errorf("node %s: no client address to record for cluster %s", nodeID, clusterID)
	}
	return r.asNode(r.store.SetOmap(ctx, r.pool, r.object, map[string]string{addrKey(nodeID, clusterID): ip.Unmap().String()}))
}

// ClientIP reads the address node nodeID last recorded for the cluster
// clusterID; ok is false when it recorded none.
func (r *Registry) ClientIP(ctx context.Context, nodeID, clusterID string) (ip netip.Addr, ok bool, err error) {
	if err := checkAddrKey(nodeID, clusterID); err != nil {
		return netip.Addr{}, false, err
	}
	v, ok, err := r.store.GetOmap(ctx, r.pool, r.object, addrKey(nodeID, clusterID))
	if err != nil || !ok {
		return netip.Addr{}, false, err
	}
	if ip, err = netip.ParseAddr(strings.TrimSpace(v)); err != nil {
		return netip.Addr{}, false, fmt.Errorf("node %s has a malformed client address %q for cluster %s: %w", nodeID, v, clusterID, err)
	}
	return ip.Unmap(), true, nil
}

// checkAddrKey refuses IDs that would make another key: a node ID or
// clusterID holding "/" could read or write a key of another node.
func checkAddrKey(nodeID, clusterID string) error {
	if !ValidNodeID(nodeID) {
		return fmt.Errorf("node ID %q is not valid", nodeID)
	}
	return volid.ValidClusterID(clusterID)
}
