package records

import "github.com/rbdcsi/rbdcsi/internal/rbd"

// Keys of the controller's try-locks (internal/lock) that the request
// path and the upkeep both take.

// PoolKey names a pool across clusters: the key of its sweep.
func PoolKey(p rbd.Pool) string { return p.MonHost + "/" + p.Name + "/" + p.Namespace }

// PoolImageKey names an image across clusters and pools: the key of its
// background work (flatten, sparsify) and of the sweep's clean marks.
func PoolImageKey(p rbd.Pool, image string) string { return PoolKey(p) + "/" + image }

// ImageLock is held while a request creates the image or snapshots it for
// a clone; the sweep and the KEK rotation take it too.
func ImageLock(p rbd.Pool, image string) string { return "image/" + PoolImageKey(p, image) }

// ParentLock is the lock under which changes to an image's snapshots and
// clones queue. Locks of this kind are only ever taken from a child
// towards its ancestors, so holders cannot wait on each other in a circle.
func ParentLock(pool, imageID string) string { return "parent/" + pool + "/" + imageID }

// SnapshotNameLock is held by a CreateSnapshot of that request name, and
// by the sweep of its claim.
func SnapshotNameLock(name string) string { return "snap/" + name }

// GroupLock is held by the requests on a group snapshot, and by its sweep.
func GroupLock(p rbd.Pool, hash string) string { return "vgs/" + PoolKey(p) + "/" + hash }
