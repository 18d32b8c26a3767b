package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Pools reads a pool's space flags from the cluster's monitors (one
// round trip: a cluster that does not answer is an error).
type Pools interface {
	PoolHealth(ctx context.Context, p rbd.Pool) (rbd.PoolHealth, error)
}

// Blocklist reads the cluster's OSD blocklist: whether the client
// instance at addr ("ip:port/nonce") is barred.
type Blocklist interface {
	Blocklisted(ctx context.Context, monHost string, cred cluster.Credentials, addr string) (bool, error)
}

// storageProbeTimeout bounds each cluster's answer: the monitors answer
// an osd dump in milliseconds.
const storageProbeTimeout = 10 * time.Second

// NodeGetStorageHealth reports, as the node's own user, each cluster of
// the map whose monitors do not answer or refuse the user
// (STORAGE_UNREACHABLE: its volumes cannot be staged here), and each pool
// of a volume staged here that is full or nearly full (STORAGE_DEGRADED).
// The clusters are asked at once, each within storageProbeTimeout.
func (n *Node) NodeGetStorageHealth(ctx context.Context, _ *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	if n.pools == nil || n.cred == nil {
		return nil, status.Error(codes.Unimplemented, "NodeGetStorageHealth needs the node's own Ceph user (--node-secret-dir)")
	}
	staged := map[string][]string{} // cluster ID -> pools of staged volumes
	recs, err := n.store.all()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the staged volumes: %v", err)
	}
	for _, r := range recs {
		if r.Staged && !slices.Contains(staged[r.Image.ClusterID], r.Image.Pool) {
			staged[r.Image.ClusterID] = append(staged[r.Image.ClusterID], r.Image.Pool)
		}
	}
	// Each cluster's conditions in a slot of its own, by cluster ID.
	all := n.clusters.All()
	slices.SortFunc(all, func(a, b cluster.Cluster) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	found := make([][]*csi.NodeGetStorageHealthResponse_StorageBackendHealth, len(all))
	var wg sync.WaitGroup
	for i, cl := range all {
		add := func(s csi.StorageHealthErrorType, reason, msg string) {
			found[i] = append(found[i], &csi.NodeGetStorageHealthResponse_StorageBackendHealth{Status: s, Reason: reason, Message: msg + " (" + healthDoc + ")"})
		}
		wg.Go(func() { n.probeCluster(ctx, cl, staged[cl.ClusterID], add) })
	}
	wg.Wait()
	var out []*csi.NodeGetStorageHealthResponse_StorageBackendHealth
	for _, f := range found {
		out = append(out, f...)
	}
	return &csi.NodeGetStorageHealthResponse{BackendHealth: out}, nil
}

// probeCluster asks one cluster about the pools of the volumes staged
// from it, or, with none, about no pool: a round trip all the same.
func (n *Node) probeCluster(ctx context.Context, cl cluster.Cluster, pools []string, add func(csi.StorageHealthErrorType, string, string)) {
	if len(pools) == 0 {
		pools = []string{""}
	}
	ctx, cancel := context.WithTimeout(ctx, storageProbeTimeout)
	defer cancel()
	for _, p := range pools {
		h, err := n.pools.PoolHealth(ctx, rbd.NewPool(cl, *n.cred, p))
		switch {
		case errors.Is(err, rbd.ErrPermission):
			add(csi.StorageHealthErrorType_STORAGE_UNREACHABLE, "NodeUserRefused",
				fmt.Sprintf("cluster %s refuses the node's user %s: volumes of this cluster cannot be staged here (%v)", cl.ClusterID, n.cred.ID, err))
			return
		case err != nil:
			add(csi.StorageHealthErrorType_STORAGE_UNREACHABLE, "ClusterUnreachable",
				fmt.Sprintf("the monitors of cluster %s (%s) did not answer within %v: volumes of this cluster cannot be staged here, and staged ones may hang; check the node's network to them (%v)",
					cl.ClusterID, strings.Join(cl.Monitors, ","), storageProbeTimeout, err))
			return
		case h.InactivePGs > 0:
			add(csi.StorageHealthErrorType_STORAGE_DEGRADED, "PlacementGroupsInactive",
				fmt.Sprintf("%d placement groups of pool %s of cluster %s are stuck inactive: I/O of the volumes staged from it that reaches them waits", h.InactivePGs, p, cl.ClusterID))
		case h.Full:
			add(csi.StorageHealthErrorType_STORAGE_DEGRADED, "PoolFull",
				fmt.Sprintf("pool %s of cluster %s is full: writes of the volumes staged from it wait", p, cl.ClusterID))
		case h.NearFull:
			add(csi.StorageHealthErrorType_STORAGE_DEGRADED, "PoolNearFull",
				fmt.Sprintf("pool %s of cluster %s is nearly full", p, cl.ClusterID))
		}
	}
}
