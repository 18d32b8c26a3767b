package rbd

import "errors"

// Errors the callers act on. Every error a Backend returns that has one of
// these causes wraps it, so errors.Is works; the contract suite
// (internal/rbd/rbdtest) pins which operation yields which.
var (
	ErrNotFound     = errors.New("not found")
	ErrPoolNotFound = errors.New("pool not found")
	// ErrNamespaceNotFound comes wrapped with ErrPoolNotFound: to a
	// volume, a missing namespace is a missing pool.
	ErrNamespaceNotFound = errors.New("RADOS namespace not found")
	ErrExists            = errors.New("already exists")
	ErrBusy              = errors.New("in use")
	// ErrSyncRunning comes wrapped with ErrBusy: rbd-mirror is writing a
	// sync from the peer into this copy, so the peer is reachable.
	ErrSyncRunning = errors.New("a mirror sync into this copy is running")
	// ErrHasSnapshots: the image has snapshots, or deleted snapshots that
	// clones still depend on (RBD's ENOTEMPTY).
	ErrHasSnapshots = errors.New("has snapshots")
	ErrNoSpace      = errors.New("no space left in pool")
	ErrUnavailable  = errors.New("cluster unavailable")
	ErrPermission   = errors.New("permission denied")
	ErrInvalid      = errors.New("invalid argument")
	// ErrUnusableKey: the Ceph client cannot read or use the user's key
	// (an AES256K key in a client older than Squid 19.2.6).
	ErrUnusableKey = errors.New("unusable key")
	// ErrNotSupported: this backend's Ceph library lacks the call (group
	// snapshots before Squid 19).
	ErrNotSupported = errors.New("not supported by this Ceph library")
	// ErrNotMirrored: the image is not mirrored, or its pool mirrors no
	// images one by one (the pool's mirror mode is not "image").
	ErrNotMirrored = errors.New("not mirrored")
)
