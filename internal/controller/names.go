package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// naming is how one driver instance names what it makes in a pool, and
// tells its own from anything else there: other tools' images, and those
// of other instances (Kubernetes clusters) sharing the pool. The default
// instance ("") names everything as the driver always has. Instance X
// hashes X into every name, ends its image names in ".X", and keeps its
// index objects under ".X" too, so that each instance lists, deletes and
// sweeps only its own, without reading anything to tell them apart: an
// image a crash left without any metadata is still plainly one instance's.
type naming struct {
	instance string
	// prefixes name volume images: volumePrefix and the controller's
	// --volume-name-prefixes.
	prefixes []string
}

func newNaming(instance string, extraPrefixes []string) naming {
	return naming{instance: instance, prefixes: append([]string{volumePrefix}, extraPrefixes...)}
}

// instanceSep ends an instance's image names before its ID. Neither hex
// digits nor instance IDs hold it, so no instance's names match another's.
const instanceSep = "."

// suffix ends the names of the instance's images.
func (n naming) suffix() string {
	if n.instance == "" {
		return ""
	}
	return instanceSep + n.instance
}

// hash of a request name, scoped to the instance: two clusters sending
// the same name get different objects.
func (n naming) hash(s string, size int) string {
	if n.instance != "" {
		s = n.instance + "/" + s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:size])
}

// image derives the image name from the request name, so a retried
// CreateVolume finds the image its earlier attempt made without any
// separate journal: one Ceph round trip fewer per create, nothing else to
// keep consistent. 80 bits of hash; the stored request name catches a
// collision. prefix is volumePrefix or a StorageClass's volumeNamePrefix.
func (n naming) image(prefix, requestName string) string {
	return prefix + n.hash(requestName, 10) + n.suffix()
}

// snap derives the RBD snapshot name from the CreateSnapshot name.
func (n naming) snap(requestName string) string { return snapPrefix + n.hash(requestName, 8) }

// group names the RBD group of a group snapshot, from its request name
// (48 bits of hash: member snapshot names have room for no more; the
// record's stored request name catches a collision).
func (n naming) group(requestName string) string {
	return groupPrefix + n.hash("group/"+requestName, 6) + n.suffix()
}

// groupHash is the hash part of one of the instance's group names.
func (n naming) groupHash(group string) (string, bool) {
	h, ok := n.own(group, groupPrefix)
	return h, ok && len(h) == 12 && isLowerHex(h)
}

func (n naming) isGroup(group string) bool { _, ok := n.groupHash(group); return ok }

// groupOf is the group name of a group hash.
func (n naming) groupOf(hash string) string { return groupPrefix + hash + n.suffix() }

// groupMember names member image i of a group snapshot while it is made.
func (n naming) groupMember(hash string, i int) string {
	return groupPrefix + hash + "-" + strconv.Itoa(i) + n.suffix()
}

// isGroupMember tells the member images of the group snapshot of hash.
func (n naming) isGroupMember(hash, name string) bool {
	i, ok := n.own(name, groupPrefix+hash+"-")
	_, err := strconv.Atoi(i)
	return ok && err == nil
}

// groupMemberSnap names the snapshot of member i of a group snapshot; a
// "-" in it tells it from CreateSnapshot's (groupOfSnap).
func (n naming) groupMemberSnap(hash string, i int) string {
	return snapPrefix + hash + "-" + strconv.Itoa(i)
}

// groupOfSnap is the group hash of a group snapshot's member snapshot.
func groupOfSnap(snap string) (string, bool) {
	rest, ok := strings.CutPrefix(snap, snapPrefix)
	h, _, member := strings.Cut(rest, "-")
	return h, ok && member && len(h) == 12 && isLowerHex(h)
}

// tmpSnap names the snapshot a volume clone is made from.
func (n naming) tmpSnap(requestName string) string { return tmpSnapPrefix + n.hash(requestName, 8) }

// hidden names a deleted volume's image kept for its dependents.
func (n naming) hidden(imageID string) string { return hiddenPrefix + imageID + n.suffix() }

// hiddenID is the image ID of one of the instance's hidden images.
func (n naming) hiddenID(name string) (string, bool) {
	id, ok := n.own(name, hiddenPrefix)
	return id, ok && id != "" && !strings.Contains(id, instanceSep)
}

// own strips prefix and the instance's suffix from name, if it has both.
func (n naming) own(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	if n.instance == "" {
		return rest, true
	}
	return strings.CutSuffix(rest, n.suffix())
}

// isVolumeImage tells the instance's volume images from anything else in
// a pool, including other drivers' images that share a prefix: the sweep
// removes unfinished ones, DeleteVolume finished ones.
func (n naming) isVolumeImage(name string) bool {
	for _, p := range n.prefixes {
		if h, ok := n.own(name, p); ok && len(h) == 20 && isLowerHex(h) {
			return true
		}
	}
	return false
}

// finished reports whether a volume image is complete: it carries the
// request name it was made for. A clone inherits its parent's metadata, so
// a name that does not hash to this image's name is an inherited one, and
// the image is the unfinished remains of a crash.
func (n naming) finished(meta map[string]string, image string) bool {
	owner := meta[metaName]
	return owner != "" && n.image(namePrefixOf(meta), owner) == image
}

// object names one of the instance's index objects in a pool.
func (n naming) object(base string) string { return config.InstanceObject(base, n.instance) }

// namePrefixOf is the prefix a volume image was named with, as its
// metadata records it (volumePrefix when it records none).
func namePrefixOf(meta map[string]string) string {
	if p := meta[metaNamePrefix]; p != "" {
		return p
	}
	return volumePrefix
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// namePrefix is the prefix a new volume of these parameters is named
// with: the StorageClass's volumeNamePrefix, which must be one the
// controller was started with, or volumePrefix.
func (c *Controller) namePrefix(p config.Params) (string, error) {
	if p.VolumeNamePrefix == "" {
		return volumePrefix, nil
	}
	if !slices.Contains(c.names.prefixes, p.VolumeNamePrefix) {
		return "", status.Errorf(codes.InvalidArgument, "parameter %s: %q is not a prefix this driver's controller was started with; add it to its --volume-name-prefixes (it then treats every image so named as its own)", config.ParamVolumeNamePrefix, p.VolumeNamePrefix)
	}
	return p.VolumeNamePrefix, nil
}
