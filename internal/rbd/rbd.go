// Package rbd is the storage contract of the driver: the Backend interface
// the controller and the node program against, its value types and its
// errors. It has no cgo, so the packages that use it build and test
// without librbd; internal/rbd/ceph implements it on go-ceph and
// internal/rbd/fake in memory, and internal/rbd/rbdtest holds the one
// suite both must pass.
package rbd

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// Pool addresses one pool of one cluster as one Ceph user.
type Pool struct {
	MonHost string
	Cred    cluster.Credentials
	Name    string
	// Namespace is the RADOS namespace inside the pool ("" = default).
	Namespace string
}

// NewPool is the pool name of a cluster-map entry, in the entry's RADOS
// namespace, used with cred.
func NewPool(cl cluster.Cluster, cred cluster.Credentials, name string) Pool {
	return Pool{MonHost: cl.MonHost(), Cred: cred, Name: name, Namespace: cl.Namespace()}
}

// WithName is another pool of the same cluster, RADOS namespace and
// credentials: a clone's parent's, say.
func (p Pool) WithName(name string) Pool {
	p.Name = name
	return p
}

// ImageSpec is what an image is created with.
type ImageSpec struct {
	Size     uint64
	Features []string
	DataPool string
	// Metadata is set right after the image is created. A crash between the
	// two leaves an image without it, which callers treat as unfinished.
	Metadata map[string]string
	// Marker, if set, is the key of Metadata written last. Callers read its
	// presence as "every other key is there", so a crash between two keys
	// never leaves an image that looks finished but lacks some of them.
	Marker string
}

// MetadataOrder is the order a backend writes spec.Metadata in: sorted,
// with the Marker last.
func (s ImageSpec) MetadataOrder() []string {
	keys := make([]string, 0, len(s.Metadata))
	for k := range s.Metadata {
		if k != s.Marker {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if _, ok := s.Metadata[s.Marker]; ok {
		keys = append(keys, s.Marker)
	}
	return keys
}

// ImageInfo is what Stat reports.
// PoolHealth is the pool's flags in Ceph's OSD map that concern its space.
type PoolHealth struct {
	// Full: writes wait until space is freed; Quota says the pool's own
	// quota is reached (else an OSD the pool maps to is full).
	Full, Quota bool
	// NearFull: an OSD the pool maps to passed the nearfull ratio.
	NearFull bool
	// InactivePGs counts the pool's placement groups Ceph reports stuck
	// inactive (I/O to the objects they hold waits), InactiveState the
	// state of one of them.
	InactivePGs   int
	InactiveState string
}

// ImageInfo is what Stat reads of an image.
type ImageInfo struct {
	Name     string
	ID       string
	Size     uint64
	Metadata map[string]string
	// Features are the image's features by name, sorted; Ceph adds some of
	// its own (data-pool, operations) to what the image was created with.
	Features []string
}

// SnapInfo describes one snapshot of an image (user namespace only).
type SnapInfo struct {
	Name string
	// ID is RBD's snapshot ID: IDs grow with each snapshot of an image,
	// whatever its namespace (user, group, trash), so they order them.
	ID      uint64
	Size    uint64
	Created time.Time
}

// Parent names the snapshot a clone was made from.
type Parent struct {
	Pool, Image, ImageID, Snap string
	// SnapID names the snapshot in any namespace: a group snapshot's
	// image snapshot has a name of librbd's making.
	SnapID uint64
	// Trash is set when the parent image is in the RBD trash.
	Trash bool
}

// Family is an image with what ties it to others: its snapshots, its
// parent (for a clone) and how many clients have it open.
type Family struct {
	ImageInfo
	// Snaps are the user snapshots, oldest first.
	Snaps []SnapInfo
	// Snapshots the user deleted while clones still depended on them
	// (the RBD trash snapshot namespace) that a clone still needs, and
	// the image's snapshots in live group snapshots (GroupBackend). RBD
	// removes such a snapshot with its last clone, except when two clones
	// detach at once; one left without clones is not counted, and RBD
	// removes it with the image.
	TrashedSnaps int
	Parent       *Parent
	Watchers     int
	Created      time.Time
	// Mirror is set when the image is mirrored (MirrorBackend): whether
	// this copy is the primary one. Its mirror snapshots are in no count.
	Mirror *MirrorInfo
}

// Client is a client that has an image open read-write: Ceph lists a
// watch of it on the image header (every mapping, krbd, rbd-nbd or
// rbd-fuse, has one while it can reach the cluster), or it holds the
// image's exclusive lock (from its first write until it closes the
// image). A client cut off from the cluster loses its watch when the OSD
// times it out (30 s by default) but keeps the lock, so the lock is
// what names a mapping whose node is gone from the network.
type Client struct {
	// Addr is the client's address as the blocklist takes it,
	// ip:port/nonce: the nonce tells one client instance from another
	// on the same host.
	Addr string
	// Own: one of this backend's own connections (the controller opening
	// the image itself, to write metadata or flatten it).
	Own bool
	// Watch: Ceph lists a watch of the client; Lock: it holds the
	// exclusive lock.
	Watch, Lock bool
}

// clientAddr is one client instance's address, ip:port/nonce ("[::1]:0/7"
// for IPv6), as watchers are listed under and the blocklist takes them.
var clientAddr = regexp.MustCompile(`^([0-9.]+|\[[0-9A-Fa-f:.]+\]):[0-9]+/[0-9]+$`)

// ValidClientAddr accepts one client instance's address, and nothing
// wider: the monitor would also take a bare IP, and blocklist every
// client of that host.
func ValidClientAddr(addr string) error {
	if !clientAddr.MatchString(addr) {
		return fmt.Errorf("%w: %q is not a client address (ip:port/nonce)", ErrInvalid, addr)
	}
	return nil
}

// GroupSnap is one complete group snapshot: the snapshot each image of
// the group had taken in it.
type GroupSnap struct {
	Members []GroupMember // sorted by Image
}

// GroupMember is one image's snapshot in a group snapshot, by the RBD
// snapshot ID a clone takes (CloneSpec.ParentSnapID).
type GroupMember struct {
	Image  string
	SnapID uint64
}

// CloneSpec is a copy-on-write child of a parent image's snapshot.
type CloneSpec struct {
	ParentImage, ParentSnap string
	// ParentSnapID, when not zero, names the parent snapshot by ID instead
	// of ParentSnap: the only way to reach a group snapshot's image
	// snapshot (GroupMember.SnapID).
	ParentSnapID uint64
	// DropMetadataPrefixes: RBD copies the parent's metadata into a clone;
	// keys with one of these prefixes are the parent's own (bookkeeping,
	// QoS limits) and removed, unless the clone's Metadata sets them.
	DropMetadataPrefixes []string
	ImageSpec
}

// Drops reports whether an inherited metadata key goes from the clone.
func (s CloneSpec) Drops(key string) bool {
	if _, ours := s.Metadata[key]; ours {
		return false
	}
	for _, p := range s.DropMetadataPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Observer is told how long each Ceph operation took (internal/metrics
// implements it; declared here so no backend imports Prometheus).
type Observer interface {
	ObserveCephOp(op string, took time.Duration, err error)
}
