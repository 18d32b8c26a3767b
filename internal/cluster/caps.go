package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// The caps below are the ones docs/install.md gives each user, in the
// syntax `ceph auth caps` takes, so that a refusal can name what to grant.

// CapsDoc is the install guide's section on the Ceph users and their caps.
const CapsDoc = "docs/install.md#3-the-ceph-users"

// CapMon is the driver's monitor cap: connecting, listing pools and adding
// OSD blocklist entries (fencing).
const CapMon = "mon 'profile rbd'"

// NodeMon is the node user's monitor cap: what every RBD client needs
// (profile rbd: the maps, and a blocklist entry for the dead owner of an
// exclusive lock that librbd or krbd breaks) and lifting the OSD blocklist
// entries of its own node's fences.
const NodeMon = `profile rbd, allow command "osd blocklist" with blocklistop=rm`

// CapNodeMon is NodeMon as `ceph auth caps` takes it.
const CapNodeMon = "mon '" + NodeMon + "'"

// nodeStageGrants are the OSD grants that map and use the images of a pool:
// read and write data, object maps and headers, and the clone parents'
// children lists; read the pool's directory objects (rbd-fuse lists the
// pool, and a listing reads the trash). Whole headers, not only their
// watch, lock and metadata: a client that holds an image's exclusive lock
// executes the snapshots, resizes and flattens other clients ask of it
// (librbd forwards them to the lock owner), so the node's librbd-based
// mappers (nbd, fuse) carry out the controller's. Mirror snapshots too
// (enabling replication, a demote, a schedule's): they write the image's
// state into rbd_mirror_snapshot.<image id>.* objects. No write to the pool's
// directory, ID or trash objects: the user cannot create, remove, rename
// or trash images. The pool's own metadata (rbd_info, read at every open)
// is in its default namespace, outside a tenant's: that grant names no
// namespace (CapNode).
var nodeStageGrants = []string{
	"allow rwx %s object_prefix rbd_data.",
	"allow rwx %s object_prefix rbd_object_map.",
	"allow rwx %s object_prefix rbd_header.",
	"allow rwx %s object_prefix rbd_children",
	"allow r class-read %s object_prefix rbd_id.",
	"allow r class-read %s object_prefix rbd_directory",
	"allow r class-read %s object_prefix rbd_mirroring",
	"allow r class-read %s object_prefix rbd_trash",
	"allow rwx %s object_prefix rbd_mirror_snapshot.",
}

// CapNode is NodeOSD as `ceph auth caps` takes it.
func CapNode(ns, registryPool, prefix string, pools, dataPools []string) string {
	return "osd '" + NodeOSD(ns, registryPool, prefix, pools, dataPools) + "'"
}

// NodeOSD is the node user's OSD cap: staging the images of pools (in
// namespace ns), the data of dataPools (erasure-coded data pools of their
// images), and the node registry objects (prefix in registryPool).
func NodeOSD(ns, registryPool, prefix string, pools, dataPools []string) string {
	where := func(p string) string {
		if ns != "" {
			return "pool=" + p + " namespace=" + ns
		}
		return "pool=" + p
	}
	var grants []string
	for _, p := range pools {
		for _, g := range nodeStageGrants {
			grants = append(grants, fmt.Sprintf(g, where(p)))
		}
		grants = append(grants, "allow r class-read pool="+p+" object_prefix rbd_info")
	}
	for _, p := range dataPools {
		grants = append(grants, "allow rwx "+where(p)+" object_prefix rbd_data.")
	}
	grants = append(grants, "allow rwx "+where(registryPool)+" object_prefix "+prefix)
	return strings.Join(grants, ", ")
}

// CapRBD is the OSD cap for images, snapshots and the driver's objects in
// pools, in the RADOS namespace ns ("" = the default one).
func CapRBD(ns string, pools ...string) string {
	grants := make([]string, 0, len(pools))
	for _, p := range pools {
		g := "profile rbd pool=" + p
		if ns != "" {
			g += " namespace=" + ns
		}
		grants = append(grants, g)
	}
	return "osd '" + strings.Join(grants, ", ") + "'"
}

// CapMgr is the manager cap that serves the pool's statistics (GetCapacity).
func CapMgr(pool string) string { return "mgr 'profile rbd pool=" + pool + "'" }

// CapRegistry is the node user's OSD cap: the node registry objects, whose
// names start with prefix, in pool (and namespace ns).
func CapRegistry(pool, ns, prefix string) string {
	where := "pool=" + pool
	if ns != "" {
		where += " namespace=" + ns
	}
	return "osd 'allow rwx " + where + " object_prefix " + prefix + "'"
}

// OnPool names a pool, in its RADOS namespace, as refusals say what the user
// was refused on.
func OnPool(ns string, pools ...string) string {
	s := "pool " + strings.Join(pools, " and pool ")
	if ns != "" {
		s += ", namespace " + ns
	}
	return s
}

// Refused is a call Ceph refused a user: what on, and the caps the user
// needs for it. Err is the refusal as it came, wrapping the caller's own
// permission sentinel; Refused adds only words, never a key.
type Refused struct {
	User string // without "client."
	On   string // "pool rbd", "object rbdcsi.nodes in pool rbd", "the monitors"
	Need string // caps, as `ceph auth caps` takes them
	Err  error
}

func (e *Refused) Error() string {
	return fmt.Sprintf("Ceph refused client.%s on %s: the user needs %s (%s; `ceph auth get client.%s` shows its caps): %v",
		e.User, e.On, e.Need, CapsDoc, e.User, e.Err)
}

func (e *Refused) Unwrap() error { return e.Err }

// Needing is the same refusal asking for other caps: a caller that knows
// which user's role it was (the node registry's) names that role's caps.
func (e *Refused) Needing(on, need string) *Refused {
	return &Refused{User: e.User, On: on, Need: need, Err: e.Err}
}

// AuthRefused is a connection the monitors refused: the user does not
// exist, the key is not its key, or it has no monitor caps at all (Ceph
// answers all three alike).
type AuthRefused struct {
	User    string
	MonHost string
	Err     error
}

func (e *AuthRefused) Error() string {
	return fmt.Sprintf("the Ceph monitors %s refused client.%s: the user does not exist, the key (the Secret's userKey) is not its key, or it has no mon caps; "+
		"compare the Secret with `ceph auth get client.%s` (%s): %v", e.MonHost, e.User, e.User, CapsDoc, e.Err)
}

func (e *AuthRefused) Unwrap() error { return e.Err }

// Named reports whether err already says who was refused and why, so that
// the layers it passes through do not name it twice.
func Named(err error) bool {
	var r *Refused
	var a *AuthRefused
	return errors.As(err, &r) || errors.As(err, &a)
}
