// Package cluster is the vocabulary of the Ceph clusters the driver
// serves: the cluster map (clusterID -> monitors, RADOS namespace), the
// credentials of a Ceph user, and the instance naming that keeps several
// Kubernetes clusters' objects in one pool apart. The storage contract,
// the node registry and the mappers need it without StorageClass
// parameters (internal/config).
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Cluster is one entry of the cluster map, the shape ceph-csi users know.
type Cluster struct {
	ClusterID string   `json:"clusterID"`
	Monitors  []string `json:"monitors"`
	RBD       RBD      `json:"rbd,omitempty"`
	// PeerClusterIDs are the clusterIDs that the other sites of RBD
	// mirroring give their clusters, whose volumes have their mirror
	// copies in this cluster: an image keeps its pool and name on every
	// site, so a volume ID of a peer's names its copy here, and resolves
	// to this entry.
	PeerClusterIDs []string `json:"peerClusterIDs,omitempty"`
}

// RBD holds a cluster entry's RBD settings.
type RBD struct {
	// RadosNamespace keeps everything the driver makes in each pool of the
	// cluster (images, index objects) in this RADOS namespace, so tenants
	// can share a pool with Ceph users limited to their namespace
	// (`profile rbd pool=P namespace=N`). Empty: the default namespace.
	// The namespace must exist (`rbd namespace create P/N`).
	RadosNamespace string `json:"radosNamespace,omitempty"`
}

// Namespace is the RADOS namespace of the cluster's volumes ("" = default).
func (c Cluster) Namespace() string { return c.RBD.RadosNamespace }

// ErrUnknown is returned by Lookup for a clusterID not in the map.
var ErrUnknown = errors.New("unknown clusterID")

// maxMapBytes bounds what we read, so a wrong path cannot eat memory.
const maxMapBytes = 1 << 20

// ParseMap decodes and validates a cluster map document.
func ParseMap(data []byte) ([]Cluster, error) {
	if len(data) > maxMapBytes {
		return nil, fmt.Errorf("cluster map is larger than %d bytes", maxMapBytes)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var clusters []Cluster
	if err := dec.Decode(&clusters); err != nil {
		return nil, fmt.Errorf("cluster map is not a JSON list of {clusterID, monitors, rbd: {radosNamespace}, peerClusterIDs}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("cluster map has trailing data after the JSON list")
	}
	seen := map[string]bool{}
	for i, c := range clusters {
		if err := volid.ValidClusterID(c.ClusterID); err != nil {
			return nil, fmt.Errorf("cluster map entry %d: %w", i, err)
		}
		if seen[c.ClusterID] {
			return nil, fmt.Errorf("cluster map lists clusterID %q twice", c.ClusterID)
		}
		seen[c.ClusterID] = true
		if len(c.Monitors) == 0 {
			return nil, fmt.Errorf("cluster %q has no monitors", c.ClusterID)
		}
		for _, m := range c.Monitors {
			if err := validMonitor(m); err != nil {
				return nil, fmt.Errorf("cluster %q: %w", c.ClusterID, err)
			}
		}
		if ns := c.Namespace(); ns != "" {
			if err := volid.ValidPool(ns); err != nil {
				return nil, fmt.Errorf("cluster %q: radosNamespace: %w", c.ClusterID, err)
			}
		}
	}
	if err := checkPeers(clusters, seen); err != nil {
		return nil, err
	}
	return clusters, nil
}

// checkPeers refuses a peer clusterID that could resolve two ways: one
// that is an entry's own, or that two entries (or one twice) list.
func checkPeers(clusters []Cluster, own map[string]bool) error {
	peerOf := map[string]string{}
	for _, c := range clusters {
		for _, p := range c.PeerClusterIDs {
			if err := volid.ValidClusterID(p); err != nil {
				return fmt.Errorf("cluster %q: peerClusterIDs: %w", c.ClusterID, err)
			}
			if own[p] {
				return fmt.Errorf("cluster %q: peerClusterIDs lists %q, a clusterID of this map: a volume ID must name one cluster", c.ClusterID, p)
			}
			if other, dup := peerOf[p]; dup {
				return fmt.Errorf("peerClusterIDs %q is listed twice (by clusters %q and %q): a volume ID must name one cluster", p, other, c.ClusterID)
			}
			peerOf[p] = c.ClusterID
		}
	}
	return nil
}

// validMonitor accepts host:port, [v2:ip:port,v1:ip:port] and the like, and
// nothing that could be taken for an option by librados or a command line.
func validMonitor(m string) error {
	if m == "" || len(m) > 256 || strings.HasPrefix(m, "-") {
		return fmt.Errorf("monitor address %.60q is not valid", m)
	}
	for _, c := range m {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".:-[],/_", c)) {
			return fmt.Errorf("monitor address %.60q holds %q", m, c)
		}
	}
	return nil
}

// MonHost is the monitors joined the way Ceph's mon_host option takes them.
func (c Cluster) MonHost() string { return strings.Join(c.Monitors, ",") }

// Map serves the cluster map from a file and picks up changes to it
// (a mounted ConfigMap is updated in place), keeping the last good map when
// a new version does not parse.
type Map struct {
	path     string
	interval time.Duration

	mu       sync.Mutex
	checked  time.Time
	modTime  time.Time
	size     int64
	clusters map[string]Cluster
	// peers maps a peer's clusterID to the entry holding its copies.
	peers   map[string]Cluster
	loadErr error
}

// LoadMap reads the map at path; it fails if the first read fails.
func LoadMap(path string) (*Map, error) {
	m := &Map{path: path, interval: time.Second}
	m.refresh(time.Now())
	if m.loadErr != nil {
		return nil, m.loadErr
	}
	return m, nil
}

// NewStaticMap serves a fixed map (for tests and embedding).
func NewStaticMap(clusters []Cluster) *Map {
	m := &Map{}
	m.set(clusters)
	return m
}

// set makes list the map. Called with m.mu held (or before m is shared).
func (m *Map) set(list []Cluster) {
	m.clusters, m.peers = map[string]Cluster{}, map[string]Cluster{}
	for _, c := range list {
		m.clusters[c.ClusterID] = c
		for _, p := range c.PeerClusterIDs {
			m.peers[p] = c
		}
	}
}

func (m *Map) refresh(now time.Time) {
	if m.path == "" || now.Sub(m.checked) < m.interval {
		return
	}
	m.checked = now
	st, err := os.Stat(m.path)
	if err != nil {
		m.loadErr = fmt.Errorf("cluster map: %w", err)
		return
	}
	if m.clusters != nil && st.ModTime().Equal(m.modTime) && st.Size() == m.size {
		return
	}
	data, err := os.ReadFile(m.path)
	if err == nil {
		var list []Cluster
		if list, err = ParseMap(data); err == nil {
			m.set(list)
			m.modTime, m.size, m.loadErr = st.ModTime(), st.Size(), nil
			return
		}
	}
	m.loadErr = fmt.Errorf("cluster map %s: %w", m.path, err)
}

// Lookup returns the cluster with the given ID, or the one that lists it
// among its peers (the entry itself, with its own clusterID).
func (m *Map) Lookup(id string) (Cluster, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refresh(time.Now())
	c, ok := m.clusters[id]
	if !ok {
		c, ok = m.peers[id]
	}
	if !ok {
		return Cluster{}, fmt.Errorf("%w %q: it is not in the cluster map", ErrUnknown, id)
	}
	return c, nil
}

// All returns every cluster, in no particular order.
func (m *Map) All() []Cluster {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refresh(time.Now())
	out := make([]Cluster, 0, len(m.clusters))
	for _, c := range m.clusters {
		out = append(out, c)
	}
	return out
}

// Health is nil when the map on disk is loaded and valid; otherwise it says
// why not (the driver keeps serving the last good map meanwhile).
func (m *Map) Health() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refresh(time.Now())
	return m.loadErr
}
