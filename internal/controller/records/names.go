// Package records is the controller's schema in Ceph: how one driver
// instance names what it makes in a pool, what it writes in an image's
// metadata (the rbdcsi.* keys, read back as a typed Volume), the omap
// indexes of work a crash could abandon, the group snapshot record, and
// the lock keys the request path and the upkeep share. It knows nothing of
// CSI requests and holds no state of its own.
package records

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// Name prefixes of what the driver creates in a pool.
const (
	// VolumePrefix names volume images unless a StorageClass's
	// volumeNamePrefix (allowed by --volume-name-prefixes) does.
	VolumePrefix = "csi-vol-"
	// HiddenPrefix + RBD image ID names a deleted volume kept for its
	// snapshots or clones; it is removed with its last dependent.
	HiddenPrefix = "csi-del-"
	// SnapPrefix names the RBD snapshots of CSI snapshots.
	SnapPrefix = "csi-snap-"
	// GroupPrefix names a group snapshot's temporary RBD group and, while
	// it is made, its member images.
	GroupPrefix = "csi-vgs-"
	// TmpSnapPrefix names the snapshot a volume-to-volume clone is made
	// from; it is deleted right after and lives on only in the RBD trash
	// namespace while the clone depends on it.
	TmpSnapPrefix = "csi-tmp-"
)

// Names is how one driver instance names what it makes in a pool, and
// tells its own from anything else there: other tools' images, and those
// of other instances (Kubernetes clusters) sharing the pool. The default
// instance ("") names everything as the driver always has. Instance X
// hashes X into every name, ends its image names in ".X", and keeps its
// index objects under ".X" too, so that each instance lists, deletes and
// sweeps only its own, without reading anything to tell them apart: an
// image a crash left without any metadata is still plainly one instance's.
type Names struct {
	instance string
	// prefixes name volume images: VolumePrefix and the controller's
	// --volume-name-prefixes.
	prefixes []string
}

// NewNames returns the names of an instance whose volume images may also
// carry the extra prefixes.
func NewNames(instance string, extraPrefixes []string) Names {
	return Names{instance: instance, prefixes: append([]string{VolumePrefix}, extraPrefixes...)}
}

// Instance is the instance ID the names are scoped to.
func (n Names) Instance() string { return n.instance }

// AllowsPrefix tells whether new volume images may be named with prefix.
func (n Names) AllowsPrefix(prefix string) bool { return slices.Contains(n.prefixes, prefix) }

// instanceSep ends an instance's image names before its ID. Neither hex
// digits nor instance IDs hold it, so no instance's names match another's.
const instanceSep = "."

// suffix ends the names of the instance's images.
func (n Names) suffix() string {
	if n.instance == "" {
		return ""
	}
	return instanceSep + n.instance
}

// hash of a request name, scoped to the instance: two clusters sending
// the same name get different objects.
func (n Names) hash(s string, size int) string {
	if n.instance != "" {
		s = n.instance + "/" + s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:size])
}

// Image derives the image name from the request name, so a retried
// CreateVolume finds the image its earlier attempt made without any
// separate journal: one Ceph round trip fewer per create, nothing else to
// keep consistent. 80 bits of hash; the stored request name catches a
// collision. prefix is VolumePrefix or a StorageClass's volumeNamePrefix.
func (n Names) Image(prefix, requestName string) string {
	return prefix + n.hash(requestName, 10) + n.suffix()
}

// Snap derives the RBD snapshot name from the CreateSnapshot name.
func (n Names) Snap(requestName string) string { return SnapPrefix + n.hash(requestName, 8) }

// IsSnap tells the RBD snapshots of CSI snapshots (group members too).
func IsSnap(name string) bool { return strings.HasPrefix(name, SnapPrefix) }

// Group names the RBD group of a group snapshot, from its request name
// (48 bits of hash: member snapshot names have room for no more; the
// record's stored request name catches a collision).
func (n Names) Group(requestName string) string {
	return GroupPrefix + n.hash("group/"+requestName, 6) + n.suffix()
}

// GroupHash is the hash part of one of the instance's group names.
func (n Names) GroupHash(group string) (string, bool) {
	h, ok := n.own(group, GroupPrefix)
	return h, ok && len(h) == 12 && isLowerHex(h)
}

// IsGroup tells the instance's group names.
func (n Names) IsGroup(group string) bool { _, ok := n.GroupHash(group); return ok }

// GroupOf is the group name of a group hash.
func (n Names) GroupOf(hash string) string { return GroupPrefix + hash + n.suffix() }

// GroupMember names member image i of a group snapshot while it is made.
func (n Names) GroupMember(hash string, i int) string {
	return GroupPrefix + hash + "-" + strconv.Itoa(i) + n.suffix()
}

// IsGroupMember tells the member images of the group snapshot of hash.
func (n Names) IsGroupMember(hash, name string) bool {
	i, ok := n.own(name, GroupPrefix+hash+"-")
	_, err := strconv.Atoi(i)
	return ok && err == nil
}

// GroupMemberSnap names the snapshot of member i of a group snapshot; a
// "-" in it tells it from CreateSnapshot's (GroupOfSnap).
func (n Names) GroupMemberSnap(hash string, i int) string {
	return SnapPrefix + hash + "-" + strconv.Itoa(i)
}

// GroupOfSnap is the group hash of a group snapshot's member snapshot.
func GroupOfSnap(snap string) (string, bool) {
	rest, ok := strings.CutPrefix(snap, SnapPrefix)
	h, _, member := strings.Cut(rest, "-")
	return h, ok && member && len(h) == 12 && isLowerHex(h)
}

// TmpSnap names the snapshot a volume clone is made from.
func (n Names) TmpSnap(requestName string) string { return TmpSnapPrefix + n.hash(requestName, 8) }

// IsTmpSnap tells the snapshots volume clones are made from (any
// instance's: an image has one owner).
func IsTmpSnap(name string) bool { return strings.HasPrefix(name, TmpSnapPrefix) }

// Hidden names a deleted volume's image kept for its dependents.
func (n Names) Hidden(imageID string) string { return HiddenPrefix + imageID + n.suffix() }

// HiddenID is the image ID of one of the instance's hidden images.
func (n Names) HiddenID(name string) (string, bool) {
	id, ok := n.own(name, HiddenPrefix)
	return id, ok && id != "" && !strings.Contains(id, instanceSep)
}

// own strips prefix and the instance's suffix from name, if it has both.
func (n Names) own(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	if n.instance == "" {
		return rest, true
	}
	return strings.CutSuffix(rest, n.suffix())
}

// IsVolumeImage tells the instance's volume images from anything else in
// a pool, including other drivers' images that share a prefix: the sweep
// removes unfinished ones, DeleteVolume finished ones.
func (n Names) IsVolumeImage(name string) bool {
	for _, p := range n.prefixes {
		if h, ok := n.own(name, p); ok && len(h) == 20 && isLowerHex(h) {
			return true
		}
	}
	return false
}

// Object names one of the instance's index objects in a pool.
func (n Names) Object(base string) string { return cluster.InstanceObject(base, n.instance) }

func isLowerHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
