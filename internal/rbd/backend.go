package rbd

import (
	"context"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// Backend is what the driver asks of Ceph: images, snapshots, format 2
// clones, image metadata, small RADOS objects (claims, omap) and the
// clients that have an image open (watchers, the blocklist). Every
// call is bounded by ctx. The errors are this package's sentinels,
// wrapped; the contract suite (internal/rbd/rbdtest) states each
// behaviour and runs against both implementations.
type Backend interface {
	// CreateImage creates an image and then sets its metadata. An
	// existing image of that name is ErrExists and stays untouched; a
	// missing pool is ErrPoolNotFound, a missing RADOS namespace too
	// (wrapping ErrNamespaceNotFound as well).
	CreateImage(ctx context.Context, p Pool, name string, spec ImageSpec) error
	// Stat reads an image's size, ID and metadata; it does not open a
	// watch, so it never counts as a user of the image.
	Stat(ctx context.Context, p Pool, name string) (ImageInfo, error)
	// Resize sets the image size.
	Resize(ctx context.Context, p Pool, name string, size uint64) error
	// RemoveImage deletes an image: ErrHasSnapshots while it has
	// snapshots (or deleted ones clones still need), ErrBusy while a
	// client has it open or it is in a group (RBD's EMLINK), ErrNotFound
	// when it is not there. An image listed without a header (a removal
	// cut short) is removed.
	// Removing a clone detaches it from its parent's snapshot, and a
	// deleted parent snapshot goes with its last clone.
	RemoveImage(ctx context.Context, p Pool, name string) error
	// ListImages returns the names of the pool's images, sorted.
	ListImages(ctx context.Context, p Pool) ([]string, error)
	// ListPools returns the cluster's pool names, sorted.
	ListPools(ctx context.Context, monHost string, cred cluster.Credentials) ([]string, error)
	// PoolAvailable returns how many bytes can still be written to the pool.
	PoolAvailable(ctx context.Context, p Pool) (int64, error)
	// PoolHealth reads what Ceph's OSD map says of the pool's space: full
	// (by quota or a full OSD) or nearly full.
	PoolHealth(ctx context.Context, p Pool) (PoolHealth, error)

	// StatFamily reads an image with its snapshots, parent and watchers,
	// by name, or by RBD image ID when name is empty.
	StatFamily(ctx context.Context, p Pool, name, id string) (Family, error)
	// CreateSnapshot makes a snapshot; an existing one of that name is
	// ErrExists.
	CreateSnapshot(ctx context.Context, p Pool, image, snap string) error
	// RemoveSnapshot deletes a snapshot of the image with the given ID. One
	// that clones still depend on moves to the RBD trash namespace (it
	// leaves Snaps and counts in TrashedSnaps) until its last clone goes.
	RemoveSnapshot(ctx context.Context, p Pool, imageID, snap string) error
	// Clone makes a format 2 clone of parent's snapshot in child, grows it
	// to spec.Size if larger, drops the inherited metadata under
	// spec.DropMetadataPrefixes and sets spec.Metadata last.
	Clone(ctx context.Context, parent, child Pool, name string, spec CloneSpec) error
	// Flatten copies the parent's data into a clone and detaches it;
	// ErrInvalid for an image without a parent.
	Flatten(ctx context.Context, p Pool, name string) error
	// Sparsify gives back to Ceph the image's zero-filled extents.
	Sparsify(ctx context.Context, p Pool, name string) error
	// Rename renames an image: ErrNotFound, or ErrExists for a taken name.
	Rename(ctx context.Context, p Pool, from, to string) error
	// SetMetadata sets keys on an existing image.
	SetMetadata(ctx context.Context, p Pool, name string, kv map[string]string) error
	// RemoveMetadata removes keys from an image; missing keys are fine.
	RemoveMetadata(ctx context.Context, p Pool, name string, keys ...string) error

	// Claim creates the RADOS object holding value, exclusively: the first
	// claim wins, and every claim returns the value that holds it.
	Claim(ctx context.Context, p Pool, object, value string) (string, error)
	// ClaimHolder reads a claim; ok is false when there is none.
	ClaimHolder(ctx context.Context, p Pool, object string) (holder string, ok bool, err error)
	// Unclaim removes a claim object; a missing one is fine.
	Unclaim(ctx context.Context, p Pool, object string) error
	// SetOmap sets keys on a RADOS object's omap, creating the object.
	SetOmap(ctx context.Context, p Pool, object string, kv map[string]string) error
	// GetOmap reads one key; ok is false when the key or object is missing.
	GetOmap(ctx context.Context, p Pool, object, key string) (value string, ok bool, err error)
	// RemoveOmapKeys removes keys; missing keys or object are fine.
	RemoveOmapKeys(ctx context.Context, p Pool, object string, keys ...string) error
	// ListOmap reads the keys that start with prefix; a missing object
	// has none.
	ListOmap(ctx context.Context, p Pool, object, prefix string) (map[string]string, error)

	// Clients lists the clients that have the image open read-write, one
	// per address, by watch or exclusive lock (ErrNotFound for a missing
	// image), marking this backend's own connections. It opens the image
	// read-only, which adds no watch and takes no lock.
	Clients(ctx context.Context, p Pool, name string) ([]Client, error)
	// Blocklist bars the client at addr (a Client's Addr) from the
	// cluster's OSDs for expire, after which Ceph drops the entry itself.
	// Ceph drops the client's watches with it (not its lock), and this
	// backend's calls made after Blocklist returns already see it in
	// force. A malformed address or an expire below one second is
	// ErrInvalid.
	Blocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string, expire time.Duration) error
	// BreakLock removes the image's exclusive lock if the client at addr
	// holds it (a lock held by another client, or none, is fine), without
	// blocklisting anyone: the caller blocklists the client first, or it
	// would take the lock again at its next write.
	BreakLock(ctx context.Context, p Pool, name, addr string) error
	// Unblocklist lifts the entry of addr; an address that is not
	// blocklisted is fine.
	Unblocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string) error

	GroupBackend
	DataBackend
	MirrorBackend
}

// GroupBackend is RBD groups and their snapshots: one snapshot taken at
// the same instant across several images, which CloneSpec.ParentSnapID
// then clones from. Groups and images are in one pool (p). A group
// snapshot's image snapshots live in RBD's group namespace: they are not
// in Family.Snaps, and a removed group snapshot that clones still need
// moves to the trash namespace (counted in TrashedSnaps) like a user one.
type GroupBackend interface {
	// GroupSnapshots is nil when this backend's library can take group
	// snapshots and clone from them, or ErrNotSupported saying what it
	// lacks. Every other call of GroupBackend, and a clone by
	// ParentSnapID, is then ErrNotSupported too.
	GroupSnapshots() error
	// CreateGroup makes an empty group: ErrExists for a taken name.
	CreateGroup(ctx context.Context, p Pool, group string) error
	// AddToGroup adds an image to a group. An image already in this
	// group is fine; one in another group is ErrExists (an image is in
	// one group at most); a missing group or image is ErrNotFound.
	AddToGroup(ctx context.Context, p Pool, group, image string) error
	// SnapshotGroup takes the group snapshot snap of all the group's
	// images at once, or returns the complete one of that name already
	// there; an incomplete one (a crash while it was taken) is removed
	// and taken again. ErrNotFound for a missing group.
	SnapshotGroup(ctx context.Context, p Pool, group, snap string) (GroupSnap, error)
	// RemoveGroup takes every image out of the group, removes its
	// snapshots and then the group. A missing group is fine.
	RemoveGroup(ctx context.Context, p Pool, group string) error
	// ListGroups returns the pool's group names, sorted.
	ListGroups(ctx context.Context, p Pool) ([]string, error)
}
