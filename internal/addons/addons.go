// Package addons serves the csi-addons services on a socket of their own.
// Beside the CSI controller: Identity, VolumeReplication (a thin
// translation of the csi-addons calls onto RBD snapshot-based mirroring
// through the storage contract, internal/rbd.MirrorBackend), the offline
// ReclaimSpace (sparsify) and NetworkFence (OSD blocklist entries of
// whole hosts and ranges). Beside the CSI node: Identity and the online
// ReclaimSpace (fstrim of a staged filesystem).
//
// The csi-addons controller acts on the codes it gets: it retries a
// Promote that failed with FailedPrecondition at once with force. So
// FailedPrecondition comes out of Promote only where a forced promote is
// the next step (the peer's primary cannot be reached); a peer that is
// alive and still primary, or a demotion still on its way, is Unavailable,
// which it retries as it was.
package addons

import (
	"context"
	"net/netip"
	"time"

	"github.com/csi-addons/spec/lib/go/fence"
	"github.com/csi-addons/spec/lib/go/identity"
	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Backend is what the controller's services ask of Ceph.
type Backend interface {
	StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error)
	Sparsify(ctx context.Context, p rbd.Pool, name string) error
	// UsedBytes is what the image's head holds of its own.
	UsedBytes(ctx context.Context, p rbd.Pool, name string) (uint64, error)
	rbd.MirrorBackend
}

// Fencer bars whole hosts and ranges of them from a cluster's OSDs
// (internal/rbd/ceph): the same OSD blocklist the controller's
// force-detach fences add single client instances to.
type Fencer interface {
	BlocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix, expire time.Duration) error
	UnblocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix) error
	BlocklistedNetworks(ctx context.Context, monHost string, cred cluster.Credentials) ([]netip.Prefix, error)
	// ClientAddress is the cluster's fsid and the IP it sees this
	// backend's connection at.
	ClientAddress(ctx context.Context, monHost string, cred cluster.Credentials) (fsid string, addr netip.Addr, err error)
}

// NodeTrim trims one staged volume (internal/node.Node.TrimVolume),
// answering a gRPC status when it cannot.
type NodeTrim func(ctx context.Context, volumeID, stagingPath string) error

// Clusters resolves a volume ID's clusterID: its own entry or the entry
// whose cluster holds the mirror copies of that peer's images.
type Clusters interface {
	Lookup(clusterID string) (cluster.Cluster, error)
}

// Options configure the services. A controller plugin sets Backend (and
// Fencer), a node plugin NodeTrim; the socket serves, and Identity
// advertises, only the services of what is set.
type Options struct {
	Backend  Backend
	Fencer   Fencer
	NodeTrim NodeTrim
	Clusters Clusters
	// Credentials are the driver's own Ceph user (--controller-secret-dir),
	// for replication and reclaim calls whose secrets name none. Nil:
	// every such call needs its own.
	Credentials *cluster.Credentials
	// Locks are the controller's try-locks: a replication call and a
	// controller call on one volume never run at once.
	Locks *lock.Keyed
	// Names tells the driver's finished volumes from unfinished images.
	Names records.Names
	// DriverName and Version are what GetIdentity answers.
	DriverName, Version string
	// Ready decides Probe (nil: always ready).
	Ready func(context.Context) error
}

// Services are the csi-addons services.
type Services struct {
	o           Options
	identity    *Identity
	replication *Replication
	reclaim     *Reclaim
	nodeReclaim *NodeReclaim
	fence       *Fence
}

// New returns the services.
func New(o Options) *Services {
	if o.Locks == nil {
		o.Locks = lock.New()
	}
	vols := volumes{o: o}
	return &Services{
		o: o,
		identity: &Identity{name: o.DriverName, version: o.Version, ready: o.Ready,
			controller: o.Backend != nil, node: o.NodeTrim != nil, fence: o.Fencer != nil},
		replication: &Replication{volumes: vols},
		reclaim:     &Reclaim{volumes: vols},
		nodeReclaim: &NodeReclaim{trim: o.NodeTrim},
		fence:       &Fence{o: o},
	}
}

// Register adds the services Options call for to a gRPC server.
func (s *Services) Register(g *grpc.Server) {
	identity.RegisterIdentityServer(g, s.identity)
	if s.o.Backend != nil {
		replication.RegisterControllerServer(g, s.replication)
		reclaimspace.RegisterReclaimSpaceControllerServer(g, s.reclaim)
	}
	if s.o.Fencer != nil {
		fence.RegisterFenceControllerServer(g, s.fence)
	}
	if s.o.NodeTrim != nil {
		reclaimspace.RegisterReclaimSpaceNodeServer(g, s.nodeReclaim)
	}
}

// Identity is the csi-addons Identity service.
func (s *Services) Identity() *Identity { return s.identity }

// Replication is the csi-addons replication Controller service.
func (s *Services) Replication() *Replication { return s.replication }

// Reclaim is the csi-addons ReclaimSpace controller service.
func (s *Services) Reclaim() *Reclaim { return s.reclaim }

// NodeReclaim is the csi-addons ReclaimSpace node service.
func (s *Services) NodeReclaim() *NodeReclaim { return s.nodeReclaim }

// Fence is the csi-addons NetworkFence service.
func (s *Services) Fence() *Fence { return s.fence }
