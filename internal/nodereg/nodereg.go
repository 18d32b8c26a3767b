// Package nodereg is the controller's source of truth for which nodes exist:
// each node plugin keeps a heartbeat in one small RADOS object (an omap key
// per node ID), and the controller treats a node whose heartbeat is older
// than a TTL as unknown. It works wherever the node plugins reach Ceph, with
// no Kubernetes API access, and needs only a Ceph user that may write that
// one object.
package nodereg

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Object is the RADOS object holding the heartbeats.
const Object = "rbdcsi.nodes"

// Store is the omap access the registry needs; internal/rbd implements it.
type Store interface {
	SetOmap(ctx context.Context, p rbd.Pool, object string, kv map[string]string) error
	GetOmap(ctx context.Context, p rbd.Pool, object, key string) (string, bool, error)
	RemoveOmapKeys(ctx context.Context, p rbd.Pool, object string, keys ...string) error
}

// Registry reads and writes node heartbeats in one pool.
type Registry struct {
	store Store
	pool  rbd.Pool
	ttl   time.Duration
	now   func() time.Time
}

// New returns a registry in pool; heartbeats older than ttl do not count.
func New(store Store, pool rbd.Pool, ttl time.Duration) *Registry {
	return &Registry{store: store, pool: pool, ttl: ttl, now: time.Now}
}

// ParseLocation splits "clusterID/pool".
func ParseLocation(s string) (clusterID, pool string, err error) {
	clusterID, pool, ok := strings.Cut(s, "/")
	if !ok {
		return "", "", fmt.Errorf("node registry %q: want clusterID/pool", s)
	}
	if err := volid.ValidClusterID(clusterID); err != nil {
		return "", "", fmt.Errorf("node registry: %w", err)
	}
	if err := volid.ValidPool(pool); err != nil {
		return "", "", fmt.Errorf("node registry: %w", err)
	}
	return clusterID, pool, nil
}

// ValidNodeID accepts Kubernetes node names (DNS subdomains) and the like.
func ValidNodeID(id string) bool {
	if id == "" || len(id) > 253 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// Beat records that the node is alive now.
func (r *Registry) Beat(ctx context.Context, nodeID string) error {
	return r.store.SetOmap(ctx, r.pool, Object, map[string]string{nodeID: strconv.FormatInt(r.now().Unix(), 10)})
}

// Run beats every interval until ctx ends, then removes the node's entry:
// a node that shuts down cleanly is unknown at once, one that dies is
// unknown after the TTL.
func (r *Registry) Run(ctx context.Context, nodeID string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, every)
		if err := r.Beat(bctx, nodeID); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "node heartbeat failed; the controller will refuse attachments here once it is stale", "node", nodeID)
		}
		cancel()
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.store.RemoveOmapKeys(dctx, r.pool, Object, nodeID); err != nil {
				klog.ErrorS(err, "removing node heartbeat", "node", nodeID)
			}
			return
		case <-t.C:
		}
	}
}

// Known reports whether the node has a heartbeat within the TTL.
func (r *Registry) Known(ctx context.Context, nodeID string) (bool, error) {
	if !ValidNodeID(nodeID) {
		return false, nil
	}
	v, ok, err := r.store.GetOmap(ctx, r.pool, Object, nodeID)
	if err != nil || !ok {
		return false, err
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return false, nil
	}
	return r.now().Sub(time.Unix(sec, 0)) <= r.ttl, nil
}
