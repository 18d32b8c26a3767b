// Package addons serves the csi-addons services beside the CSI controller,
// on a socket of their own: Identity and VolumeReplication, a thin
// translation of the csi-addons calls onto RBD snapshot-based mirroring
// through the storage contract (internal/rbd.MirrorBackend).
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

	"github.com/csi-addons/spec/lib/go/identity"
	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Backend is what the services ask of Ceph.
type Backend interface {
	StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error)
	rbd.MirrorBackend
}

// Clusters resolves a volume ID's clusterID: its own entry or the entry
// whose cluster holds the mirror copies of that peer's images.
type Clusters interface {
	Lookup(clusterID string) (cluster.Cluster, error)
}

// Options configure the services.
type Options struct {
	Backend  Backend
	Clusters Clusters
	// Credentials serve GetVolumeReplicationInfo without secrets. Nil:
	// every call needs its own.
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
	identity    *Identity
	replication *Replication
}

// New returns the services.
func New(o Options) *Services {
	if o.Locks == nil {
		o.Locks = lock.New()
	}
	return &Services{identity: &Identity{name: o.DriverName, version: o.Version, ready: o.Ready}, replication: &Replication{o: o}}
}

// Register adds the services to a gRPC server.
func (s *Services) Register(g *grpc.Server) {
	identity.RegisterIdentityServer(g, s.identity)
	replication.RegisterControllerServer(g, s.replication)
}

// Identity is the csi-addons Identity service.
func (s *Services) Identity() *Identity { return s.identity }

// Replication is the csi-addons replication Controller service.
func (s *Services) Replication() *Replication { return s.replication }
