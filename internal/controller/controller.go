// Package controller is the CSI Controller and GroupController services on
// RBD images: volumes, snapshots, clones, group snapshots, expansion,
// attachments, listing and capacity, each call idempotent by request name.
// It keeps its records in Ceph through internal/controller/records and
// hands what runs off the request path (sweeps, reclaim, flattens,
// sparsifies, KEK rotation) to internal/controller/upkeep.
package controller

import (
	"context"
	"net/netip"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/controller/upkeep"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Clusters resolves a clusterID to its monitors.
type Clusters interface {
	Lookup(clusterID string) (cluster.Cluster, error)
	All() []cluster.Cluster
}

// Nodes tells which nodes exist, indexes what is attached to each,
// records the fences of nodes that still had a volume open when it was
// detached from them, and tells the address each node reaches a cluster
// from (internal/nodereg implements it).
type Nodes interface {
	Lookup(ctx context.Context, nodeID string) (nodereg.Node, bool, error)
	Attachments(ctx context.Context, nodeID string) ([]string, error)
	AddAttachment(ctx context.Context, nodeID, volumeID string) error
	RemoveAttachment(ctx context.Context, nodeID, volumeID string) error
	AddFence(ctx context.Context, nodeID, volumeID string, f nodereg.Fence) error
	VolumeFences(ctx context.Context) (map[string]map[string]nodereg.Fence, error)
	DropExpiredFences(ctx context.Context) (int, error)
	ClientIP(ctx context.Context, nodeID, clusterID string) (netip.Addr, bool, error)
}

// DefaultFenceExpiry is how long a fenced client stays blocklisted unless
// its node lifts the entry first: Ceph's own default for the entries
// librbd adds when it breaks a dead client's lock.
const DefaultFenceExpiry = time.Hour

// Options configure a Controller.
type Options struct {
	// Backend is Ceph: internal/rbd/ceph, or internal/rbd/fake in tests.
	Backend  rbd.Backend
	Clusters Clusters
	// Credentials serve the calls that carry no secrets (ListVolumes,
	// GetCapacity, ControllerGetVolume). Nil: those are not offered.
	Credentials *cluster.Credentials
	// CloneDepthSoft: deeper clones are flattened in the background.
	CloneDepthSoft int
	// CloneDepthHard: deeper clones are flattened before CreateVolume
	// reports success.
	CloneDepthHard int
	// MaxSnapshotsPerImage bounds the snapshots of one image.
	MaxSnapshotsPerImage int
	// SweepInterval: after a delete in a pool, and periodically in every
	// pool when Credentials are set, what crashed or abandoned requests
	// left is looked for at most this often (upkeep.Options). 0: never.
	SweepInterval time.Duration
	// Nodes tells which nodes exist. Nil: attachments are not offered.
	Nodes Nodes
	// FenceExpiry is how long the clients of a node that still had a
	// volume open when it was detached stay blocklisted, unless the node
	// lifts them when it unstages the volume (0: DefaultFenceExpiry).
	FenceExpiry time.Duration
	// Upkeep is told about background work and fences (metrics). Nil:
	// nobody.
	Upkeep upkeep.Observer
	// VolumeNamePrefixes are the StorageClass volumeNamePrefix values
	// allowed besides the default, csi-vol-: images with them are this
	// driver's (listed, swept when unfinished, deleted), so the list must
	// name only prefixes no one else uses in the pools.
	VolumeNamePrefixes []string
	// DriverName names the topology keys (topology.<DriverName>/<label>).
	DriverName string
	// InstanceID scopes what the controller makes and finds in a pool to
	// its own Kubernetes cluster (cluster.ValidInstanceID; "" the default).
	InstanceID string
	// KMS says where encrypted classes' key encryption keys come from
	// (nil: encrypted classes are refused).
	KMS kms.Config
	// KMSSecrets returns the controller's own secrets (its Secret, as
	// kms.SecretsFromDir reads it), whose KEKs the KEK rotation re-wraps
	// data keys with; called at each pass. Nil, or no KMS or Credentials:
	// no rotation (upkeep's rotation.go).
	KMSSecrets func() (map[string]string, error)
	// KEKRotationInterval: how often the rotation pass runs (0: the
	// default, upkeep.DefaultKEKRotationInterval).
	KEKRotationInterval time.Duration
	// Fault, for crash tests only, is called at named points between the
	// Ceph steps of an operation ("CreateSnapshot:claimed").
	Fault func(point string)
	// AllowInsecureMapOptions lets classes switch off cephx signatures
	// and data CRCs (config.CheckMapOptionsSecure); refused otherwise.
	AllowInsecureMapOptions bool
	// AllowKEKsWithCredentials opens KMS keys found in a Secret that also
	// holds a Ceph key (kms.ErrKeysWithCredentials), for a migration.
	AllowKEKsWithCredentials bool
	// Locks are the per-volume try-locks, shared with the services beside
	// the controller (csi-addons) so one volume sees one call at a time.
	// Nil: the controller's own.
	Locks *lock.Keyed
}

// Defaults for Options.
const (
	DefaultCloneDepthSoft       = 4
	DefaultCloneDepthHard       = 8
	DefaultMaxSnapshotsPerImage = 450 // below krbd's 510-snapshot context limit
)

// keeper is what the handlers ask of the upkeep (upkeep.Keeper): to hear
// of their work (Touch, After), to start work that runs off the request
// path, and to reclaim or finish what a request leaves for it.
type keeper interface {
	Touch(pool rbd.Pool, image string)
	After(pool rbd.Pool)
	Flatten(pool rbd.Pool, image string, parent *rbd.Parent)
	Sparsify(pool rbd.Pool, image, volumeID, request string)
	Sparsifying(pool rbd.Pool, image string) bool
	Reclaim(ctx context.Context, pool rbd.Pool, imageID string) error
	ReclaimFrom(ctx context.Context, pool rbd.Pool, fam *rbd.Family) error
	FinishGroup(ctx context.Context, pool rbd.Pool, group string, rec records.GroupRecord) error
	RollbackGroup(ctx context.Context, pool rbd.Pool, group string) error
	Close()
}

// Controller is the CSI Controller service.
type Controller struct {
	csi.UnimplementedControllerServer

	backend  rbd.Backend
	clusters Clusters
	cred     *cluster.Credentials
	// locks are shared with the upkeep, which skips or queues behind
	// what a request holds.
	locks *lock.Keyed
	opts  Options
	nodes Nodes
	up    keeper
	names records.Names
	// claims and staticTmps index work the sweep finds nowhere else.
	claims     records.Claims
	staticTmps records.WorkIndex
	groups     records.Groups
	// volPages and snapPages keep what paginated listings left for
	// their next pages (pages.go).
	volPages  *pages[volid.Volume]
	snapPages *pages[*csi.ListSnapshotsResponse_Entry]
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
	if o.FenceExpiry <= 0 {
		o.FenceExpiry = DefaultFenceExpiry
	}
	if o.Upkeep == nil {
		o.Upkeep = upkeep.NopObserver{}
	}
	names := records.NewNames(o.InstanceID, o.VolumeNamePrefixes)
	locks := o.Locks
	if locks == nil {
		locks = lock.New()
	}
	uo := upkeep.Options{
		Backend: o.Backend, Locks: locks, Names: names, Clusters: o.Clusters, Credentials: o.Credentials,
		SweepInterval: o.SweepInterval, Observer: o.Upkeep, Fault: o.Fault,
		KMS: o.KMS, KMSSecrets: o.KMSSecrets, KEKRotationInterval: o.KEKRotationInterval,
	}
	if o.Nodes != nil {
		uo.Fences = o.Nodes
	}
	return &Controller{
		backend: o.Backend, clusters: o.Clusters, cred: o.Credentials, locks: locks, opts: o, nodes: o.Nodes,
		up: upkeep.New(uo), names: names,
		claims: records.NewClaims(o.Backend, names), staticTmps: records.NewStaticTmps(o.Backend, names), groups: records.NewGroups(o.Backend, names),
		volPages: newPages[volid.Volume](), snapPages: newPages[*csi.ListSnapshotsResponse_Entry](),
	}
}

// Close stops the upkeep (see upkeep.Keeper.Close).
func (c *Controller) Close() { c.up.Close() }

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
			csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
			csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
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
