// Package nodereg is the controller's source of truth for which nodes exist:
// each node plugin keeps a heartbeat in one small RADOS object (an omap key
// per node ID), and the controller treats a node whose heartbeat is older
// than a TTL as unknown. It works wherever the node plugins reach Ceph, with
// no Kubernetes API access, and needs only a Ceph user that may write that
// one object. A heartbeat also carries the node's volume limit, and the
// same object indexes which volumes the controller attached to each node,
// so the limit can be enforced without reading every image, which
// clients of a node it fenced, so the node can lift them, and the address
// each node reaches each cluster from, so a fence can tell the node's
// clients from others.
package nodereg

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Object is the RADOS object holding the heartbeats and the attachment
// index, of the default instance; instance X keeps "rbdcsi.nodes.X"
// (cluster.InstanceObject), so the nodes of Kubernetes clusters sharing a
// pool stay apart. A Ceph user with object_prefix rbdcsi.nodes may write
// either.
const Object = "rbdcsi.nodes"

// Keys of the object, besides one heartbeat per node ID ("<unix time>" or
// "<unix time> <volume limit>"). Node IDs hold no "/", so the prefixed
// keys never clash with a heartbeat.
const (
	// attachPrefix starts the index keys "attach/<node>/<volumeID>"
	// (value empty): what the controller attached to each node.
	attachPrefix = "attach/"
	// fencePrefix starts the keys "fenced/<node>/<volumeID>" = "<expiry
	// unix time> <addr> [<addr>...]": the clients the controller
	// blocklisted when it detached the volume from a node that still had
	// it open, until that node lifts them (fences.go).
	fencePrefix = "fenced/"
	// addrPrefix starts the keys "addr/<node>/<clusterID>" = "<ip>": the
	// IP the node's Ceph clients reach that cluster from, as the node
	// found it at its last stage there (addresses.go).
	addrPrefix = "addr/"
)

// Store is the omap access the registry needs; internal/rbd/ceph implements it.
type Store interface {
	SetOmap(ctx context.Context, p rbd.Pool, object string, kv map[string]string) error
	GetOmap(ctx context.Context, p rbd.Pool, object, key string) (string, bool, error)
	RemoveOmapKeys(ctx context.Context, p rbd.Pool, object string, keys ...string) error
	ListOmap(ctx context.Context, p rbd.Pool, object, prefix string) (map[string]string, error)
}

// Node is what a heartbeat tells about a node.
type Node struct {
	ID string
	// MaxVolumes is how many volumes the node can have attached; 0: no limit.
	MaxVolumes int64
}

// Registry reads and writes node heartbeats in one pool.
type Registry struct {
	store  Store
	pool   rbd.Pool
	object string
	ttl    time.Duration
	now    func() time.Time
}

// New returns the registry of an instance ("": the default) in pool;
// heartbeats older than ttl do not count.
func New(store Store, pool rbd.Pool, instance string, ttl time.Duration) *Registry {
	return &Registry{store: store, pool: pool, object: cluster.InstanceObject(Object, instance), ttl: ttl, now: time.Now}
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

// Beat records that the node is alive now. The value is the Unix time,
// then the node's volume limit when it has one.
func (r *Registry) Beat(ctx context.Context, n Node) error {
	v := strconv.FormatInt(r.now().Unix(), 10)
	if n.MaxVolumes > 0 {
		v += " " + strconv.FormatInt(n.MaxVolumes, 10)
	}
	return r.asNode(r.store.SetOmap(ctx, r.pool, r.object, map[string]string{n.ID: v}))
}

// asNode names the node user's caps in a refusal of a call the node makes:
// that user may use the registry objects only (docs/install.md), so the
// pool-wide caps a backend names would be the wrong advice.
func (r *Registry) asNode(err error) error {
	if !errors.Is(err, rbd.ErrPermission) {
		return err
	}
	on := "object " + r.object + " in " + cluster.OnPool(r.pool.Namespace, r.pool.Name)
	need := cluster.CapRegistry(r.pool.Name, r.pool.Namespace, Object)
	if ref := (*cluster.Refused)(nil); errors.As(err, &ref) {
		return ref.Needing(on, need)
	}
	if cluster.Named(err) { // the connection itself was refused
		return err
	}
	return &cluster.Refused{User: r.pool.Cred.ID, On: on, Need: need, Err: err}
}

// Run beats every interval until ctx ends, then removes the node's entry:
// a node that shuts down cleanly is unknown at once, one that dies is
// unknown after the TTL. Its attachments stay indexed: they outlive the
// plugin.
func (r *Registry) Run(ctx context.Context, n Node, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, every)
		if err := r.Beat(bctx, n); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "node heartbeat failed; the controller will refuse attachments here once it is stale", "node", n.ID)
		}
		cancel()
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.asNode(r.store.RemoveOmapKeys(dctx, r.pool, r.object, n.ID)); err != nil {
				klog.ErrorS(err, "removing node heartbeat", "node", n.ID)
			}
			return
		case <-t.C:
		}
	}
}

// Lookup returns the node if it has a heartbeat within the TTL.
func (r *Registry) Lookup(ctx context.Context, nodeID string) (Node, bool, error) {
	if !ValidNodeID(nodeID) {
		return Node{}, false, nil
	}
	v, ok, err := r.store.GetOmap(ctx, r.pool, r.object, nodeID)
	if err != nil || !ok {
		return Node{}, false, err
	}
	beat, limit, _ := strings.Cut(v, " ")
	sec, err := strconv.ParseInt(beat, 10, 64)
	if err != nil || r.now().Sub(time.Unix(sec, 0)) > r.ttl {
		return Node{}, false, nil
	}
	n := Node{ID: nodeID}
	if limit != "" {
		if n.MaxVolumes, err = strconv.ParseInt(limit, 10, 64); err != nil || n.MaxVolumes < 0 {
			return Node{}, false, fmt.Errorf("node %s has a malformed heartbeat %q", nodeID, v)
		}
	}
	return n, true, nil
}

func attachKey(nodeID, volumeID string) string { return attachPrefix + nodeID + "/" + volumeID }

// Attachments lists the volume IDs indexed as attached to the node.
func (r *Registry) Attachments(ctx context.Context, nodeID string) ([]string, error) {
	prefix := attachKey(nodeID, "")
	kv, err := r.store.ListOmap(ctx, r.pool, r.object, prefix)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(kv))
	for k := range kv {
		ids = append(ids, strings.TrimPrefix(k, prefix))
	}
	sort.Strings(ids)
	return ids, nil
}

// AddAttachment indexes a volume as attached to the node.
func (r *Registry) AddAttachment(ctx context.Context, nodeID, volumeID string) error {
	return r.store.SetOmap(ctx, r.pool, r.object, map[string]string{attachKey(nodeID, volumeID): ""})
}

// RemoveAttachment drops a volume from the node's index; absent is fine.
func (r *Registry) RemoveAttachment(ctx context.Context, nodeID, volumeID string) error {
	return r.store.RemoveOmapKeys(ctx, r.pool, r.object, attachKey(nodeID, volumeID))
}
