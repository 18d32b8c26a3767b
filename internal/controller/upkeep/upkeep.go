// Package upkeep is the controller's work off the request path: the sweep
// that finishes what crashed or abandoned requests left in a pool (each
// feature adds a step of its own), the reclaim of deleted volumes' images
// once nothing needs them, background flattens of deep clones, sparsify
// runs, the KEK rotation of encrypted volumes' data keys and the expiry of
// node fences. It works on the storage contract (internal/rbd) and the
// controller's records, and never calls the CSI handlers: they call it.
package upkeep

import (
	"context"
	"errors"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Observer is told about the work off the request path, so an admin can
// see it: flattens and sweeps running, sweeps done, and what was given
// back to the pool.
type Observer interface {
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

// What Observer.Reclaimed counts.
const (
	reclaimedHidden      = "hidden-image"       // a deleted volume's data, once nothing needed it
	reclaimedHalfRemoved = "half-removed-image" // a removal cut short, completed
	reclaimedUnfinished  = "unfinished-image"   // a create no retry came back for
	reclaimedTmpSnap     = "temporary-snapshot" // a volume clone's, no retry came back for
	reclaimedClaim       = "snapshot-claim"     // a snapshot name claim no retry came back for
	reclaimedFence       = "expired-fence"      // a fence record whose blocklist entries Ceph dropped, of a node that never lifted them
	reclaimedGroup       = "group-snapshot"     // an unfinished group snapshot no retry came back for, rolled back
)

// NopObserver hears nothing.
type NopObserver struct{}

func (NopObserver) BackgroundTasks(string, int)          {}
func (NopObserver) Swept(error)                          {}
func (NopObserver) Reclaimed(string)                     {}
func (NopObserver) Rewrapped(string, error)              {}
func (NopObserver) Fenced(error)                         {}
func (NopObserver) RotationPassed(map[string]int, error) {}

// Clusters lists the clusters of the cluster map.
type Clusters interface {
	All() []cluster.Cluster
}

// Fences drops the node registry's fence records whose blocklist entries
// Ceph has dropped by itself (internal/nodereg implements it).
type Fences interface {
	DropExpiredFences(ctx context.Context) (int, error)
}

// Defaults for Options.
const (
	DefaultSweepInterval       = 10 * time.Minute
	DefaultKEKRotationInterval = 10 * time.Minute
)

// Options configure the upkeep.
type Options struct {
	Backend rbd.Backend
	// Locks are the controller's try-locks: the upkeep skips, or queues
	// behind, what a request holds (records' lock keys).
	Locks    *lock.Keyed
	Names    records.Names
	Clusters Clusters
	// Credentials are the controller's own (--controller-secret-dir). Nil:
	// no periodic sweep and no KEK rotation, which need to list pools.
	Credentials *cluster.Credentials
	// SweepInterval: after a delete in a pool, and periodically in every
	// pool when Credentials are set, what crashed or abandoned requests
	// left is looked for at most this often (see sweeper). 0: never.
	SweepInterval time.Duration
	// Fences expire with the periodic sweep. Nil: no node registry.
	Fences Fences
	// Observer is told about the work (metrics). Nil: nobody.
	Observer Observer
	// KMS, KMSSecrets and KEKRotationInterval drive the KEK rotation
	// (rotation.go); without a KMS or secrets there is none.
	KMS                 kms.Config
	KMSSecrets          func() (map[string]string, error)
	KEKRotationInterval time.Duration
	// Fault, for crash tests only, is called at named points between the
	// Ceph steps of the work (nil: none).
	Fault func(point string)
}

// env is what every part of the upkeep works with.
type env struct {
	o          Options // with its defaults
	backend    rbd.Backend
	locks      *lock.Keyed
	names      records.Names
	claims     records.Claims
	staticTmps records.WorkIndex
	groups     records.Groups
}

func newEnv(o Options) *env {
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Fault == nil {
		o.Fault = func(string) {}
	}
	return &env{
		o: o, backend: o.Backend, locks: o.Locks, names: o.Names,
		claims: records.NewClaims(o.Backend, o.Names), staticTmps: records.NewStaticTmps(o.Backend, o.Names), groups: records.NewGroups(o.Backend, o.Names),
	}
}

func (e *env) fault(point string) { e.o.Fault(point) }

// counted is fn as a task of kind the observer counts while it runs,
// bounded by timeout.
func (e *env) counted(kind string, timeout time.Duration, fn func(ctx context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		e.o.Observer.BackgroundTasks(kind, 1)
		defer e.o.Observer.BackgroundTasks(kind, -1)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		fn(ctx)
	}
}

// ownImages lists the instance's volume and hidden images in a pool;
// readable is false when the pool is gone or the credentials may not read
// it: nothing of ours there.
func (e *env) ownImages(ctx context.Context, pool rbd.Pool) (names []string, readable bool, err error) {
	all, err := e.backend.ListImages(ctx, pool)
	if errors.Is(err, rbd.ErrPoolNotFound) || errors.Is(err, rbd.ErrPermission) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, n := range all {
		if _, hidden := e.names.HiddenID(n); hidden || e.names.IsVolumeImage(n) {
			names = append(names, n)
		}
	}
	return names, true, nil
}

// OwnPools lists the pools of a cluster that could hold volumes (valid
// names), with cred and the cluster's namespace.
func OwnPools(ctx context.Context, backend rbd.Backend, cl cluster.Cluster, cred cluster.Credentials) ([]rbd.Pool, error) {
	names, err := backend.ListPools(ctx, cl.MonHost(), cred)
	if err != nil {
		return nil, err
	}
	var pools []rbd.Pool
	for _, name := range names {
		if volid.ValidPool(name) == nil {
			pools = append(pools, rbd.NewPool(cl, cred, name))
		}
	}
	return pools, nil
}

// ownPools is OwnPools with the controller's own credentials.
func (e *env) ownPools(ctx context.Context, cl cluster.Cluster) ([]rbd.Pool, error) {
	return OwnPools(ctx, e.backend, cl, *e.o.Credentials)
}
