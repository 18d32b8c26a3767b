// Package controller implements the CSI Controller service on RBD images:
// create, delete, expand, list and capacity, idempotent by request name.
package controller

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Clusters resolves a clusterID to its monitors.
type Clusters interface {
	Lookup(clusterID string) (config.Cluster, error)
	All() []config.Cluster
}

// Options configure a Controller.
type Options struct {
	// Backend is Ceph: internal/rbd/ceph, or internal/rbd/fake in tests.
	Backend  rbd.Backend
	Clusters Clusters
	// Credentials serve the calls that carry no secrets (ListVolumes,
	// GetCapacity, ControllerGetVolume). Nil: those are not offered.
	Credentials *config.Credentials
	// CloneDepthSoft: deeper clones are flattened in the background.
	CloneDepthSoft int
	// CloneDepthHard: deeper clones are flattened before CreateVolume
	// reports success.
	CloneDepthHard int
	// MaxSnapshotsPerImage bounds the snapshots of one image.
	MaxSnapshotsPerImage int
	// SweepInterval: after a delete in a pool, and periodically in every
	// pool when Credentials are set, what crashed or abandoned requests
	// left is looked for at most this often (see sweeper). 0: never.
	SweepInterval time.Duration
	// Nodes tells which nodes exist. Nil: attachments are not offered.
	Nodes Nodes
	// FenceExpiry is how long the clients of a node that still had a
	// volume open when it was detached stay blocklisted, unless the node
	// lifts them when it unstages the volume (0: DefaultFenceExpiry).
	FenceExpiry time.Duration
	// Upkeep is told about background work (metrics). Nil: nobody.
	Upkeep Upkeep
	// VolumeNamePrefixes are the StorageClass volumeNamePrefix values
	// allowed besides the default, csi-vol-: images with them are this
	// driver's (listed, swept when unfinished, deleted), so the list must
	// name only prefixes no one else uses in the pools.
	VolumeNamePrefixes []string
	// DriverName names the topology keys (topology.<DriverName>/<label>).
	DriverName string
	// InstanceID scopes what the controller makes and finds in a pool to
	// its own Kubernetes cluster (config.ValidInstanceID; "" the default).
	InstanceID string
	// KMS says where encrypted classes' key encryption keys come from
	// (nil: encrypted classes are refused).
	KMS kms.Config
	// KMSSecrets returns the controller's own secrets (its Secret, as
	// kms.SecretsFromDir reads it), whose KEKs the KEK rotation re-wraps
	// data keys with; called at each pass. Nil, or no KMS or Credentials:
	// no rotation (crypt_rotate.go).
	KMSSecrets func() (map[string]string, error)
	// KEKRotationInterval: how often the rotation pass runs (0: the
	// default, DefaultKEKRotationInterval).
	KEKRotationInterval time.Duration
	// Fault, for crash tests only, is called at named points between the
	// Ceph steps of an operation ("CreateSnapshot:claimed").
	Fault func(point string)
}

// Upkeep is told about the controller's work off the request path, so an
// admin can see it: flattens and sweeps running, sweeps done, and what was
// given back to the pool.
type Upkeep interface {
	// BackgroundTasks moves the count of running tasks of a kind
	// ("flatten", "sweep") by delta.
	BackgroundTasks(kind string, delta int)
	// Swept counts one sweep of a pool; err is why it stopped short.
	Swept(err error)
	// Reclaimed counts one leftover removed, by what it was.
	Reclaimed(what string)
	// Rewrapped counts one data key the KEK rotation re-wrapped to its
	// KMS's current KEK; err is why it could not, and the volume keeps
	// its old wrapping until a later pass. kmsID is "unknown" for a record
	// that is malformed or names a KMS the configuration lacks.
	Rewrapped(kmsID string, err error)
	// Fenced counts one fence of a node that still had a volume open
	// when it was detached; err is why it failed (the volume stays
	// attached until a retry fences the node).
	Fenced(err error)
	// RotationPassed reports a pass of the KEK rotation over every pool:
	// per configured KMS ID (and "unknown"), how many volumes are left
	// with a data key wrapped by another KEK than the current one, or
	// unchecked (0: the old KEKs may go); err is why part of the pass
	// failed (nil pending: all of it).
	RotationPassed(pending map[string]int, err error)
}

// What Upkeep.Reclaimed counts.
const (
	reclaimedHidden      = "hidden-image"       // a deleted volume's data, once nothing needed it
	reclaimedHalfRemoved = "half-removed-image" // a removal cut short, completed
	reclaimedUnfinished  = "unfinished-image"   // a create no retry came back for
	reclaimedTmpSnap     = "temporary-snapshot" // a volume clone's, no retry came back for
	reclaimedClaim       = "snapshot-claim"     // a snapshot name claim no retry came back for
	reclaimedFence       = "expired-fence"      // a fence record whose blocklist entries Ceph dropped, of a node that never lifted them
	reclaimedGroup       = "group-snapshot"     // an unfinished group snapshot no retry came back for, rolled back
)

type nopUpkeep struct{}

func (nopUpkeep) BackgroundTasks(string, int)          {}
func (nopUpkeep) Swept(error)                          {}
func (nopUpkeep) Reclaimed(string)                     {}
func (nopUpkeep) Rewrapped(string, error)              {}
func (nopUpkeep) Fenced(error)                         {}
func (nopUpkeep) RotationPassed(map[string]int, error) {}

// Defaults for Options.
const (
	DefaultCloneDepthSoft       = 4
	DefaultCloneDepthHard       = 8
	DefaultMaxSnapshotsPerImage = 450 // below krbd's 510-snapshot context limit
	DefaultSweepInterval        = 10 * time.Minute
)

// Controller is the CSI Controller service.
type Controller struct {
	csi.UnimplementedControllerServer

	backend   rbd.Backend
	clusters  Clusters
	cred      *config.Credentials
	locks     *lock.Keyed
	opts      Options
	nodes     Nodes
	flattener *flattener
	sweeper   *sweeper
	// sparsifies run the sparsify requests, keyed by pool and image.
	sparsifies *background
	names      records.Names
	// claims and staticTmps index work the sweeper finds nowhere else.
	claims     records.Claims
	staticTmps records.WorkIndex
	groups     records.Groups
	// rotation re-wraps data keys after a KEK rotation (nil: none).
	rotation *rotation
}

// New returns a Controller.
func New(o Options) *Controller {
	if o.CloneDepthSoft <= 0 {
		o.CloneDepthSoft = DefaultCloneDepthSoft
	}
	if o.CloneDepthHard <= 0 {
		o.CloneDepthHard = DefaultCloneDepthHard
	}
	if o.MaxSnapshotsPerImage <= 0 {
		o.MaxSnapshotsPerImage = DefaultMaxSnapshotsPerImage
	}
	if o.Fault == nil {
		o.Fault = func(string) {}
	}
	if o.Upkeep == nil {
		o.Upkeep = nopUpkeep{}
	}
	if o.FenceExpiry <= 0 {
		o.FenceExpiry = DefaultFenceExpiry
	}
	c := &Controller{backend: o.Backend, clusters: o.Clusters, cred: o.Credentials, locks: lock.New(), opts: o, nodes: o.Nodes,
		names: records.NewNames(o.InstanceID, o.VolumeNamePrefixes)}
	c.flattener = newFlattener(c)
	c.sparsifies = newBackground()
	c.claims = records.NewClaims(o.Backend, c.names)
	c.staticTmps = records.NewStaticTmps(o.Backend, c.names)
	c.groups = records.NewGroups(o.Backend, c.names)
	c.sweeper = newSweeper(c, o.SweepInterval)
	c.sweeper.startPeriodic()
	c.rotation = newRotation(c)
	c.rotation.start()
	return c
}

// Close stops background work (flattens in flight are abandoned; a later
// CreateVolume on the same chain starts them again; a sweep cut short is
// run again after the next delete or periodic pass).
func (c *Controller) Close() {
	c.flattener.stop()
	c.sweeper.stop()
	c.sparsifies.stop()
	c.rotation.stop()
}

// ControllerGetCapabilities advertises only what works: the list, capacity
// and get calls need controller credentials, since they carry no secrets.
func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	}
	if c.nodes != nil {
		caps = append(caps,
			csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		)
	}
	if c.cred != nil && c.nodes != nil {
		caps = append(caps, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	if c.cred != nil {
		caps = append(caps,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
			csi.ControllerServiceCapability_RPC_GET_CAPACITY,
			csi.ControllerServiceCapability_RPC_GET_VOLUME,
		)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}
