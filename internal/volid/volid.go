// Package volid encodes and decodes the self-describing volume and snapshot
// IDs handed to Kubernetes. An ID names the cluster, pool and image (and the
// snapshot) without any lookup, carries a version so the format can evolve,
// is printable and never longer than MaxLen bytes.
package volid

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLen is the longest ID we ever hand out (CSI recommends <= 128 bytes).
const MaxLen = 128

// Limits on the parts. They keep every ID within MaxLen.
const (
	MaxClusterIDLen = 40
	MaxPoolLen      = 32
	// Our own images' names are 28 bytes; static volumes name images of
	// other makers (ceph-csi's csi-vol-<uuid> is 44, the in-tree plugin's
	// kubernetes-dynamic-pvc-<uuid> 58). A long image in a long pool of a
	// long clusterID is refused by the ID's total length instead.
	maxImageLen   = 64
	maxImageIDLen = 24 // RBD image IDs are 12-16 hex digits
	maxSnapLen    = 26
	maxGroupLen   = 64
)

const (
	volumePrefix   = "v1"
	snapshotPrefix = "s1"
	groupPrefix    = "g1"
	sep            = ":"
)

// ErrMalformed is returned for any string that is not an ID of ours.
var ErrMalformed = errors.New("malformed ID")

// Volume identifies an RBD image.
type Volume struct {
	ClusterID string
	Pool      string
	Image     string
}

// Snapshot identifies an RBD snapshot. The image is named by its RBD image
// ID (not its name) so the snapshot stays addressable after its source
// volume is deleted and the image hidden under another name.
type Snapshot struct {
	ClusterID string
	Pool      string
	ImageID   string
	Snap      string
}

// Group identifies a group snapshot: the RBD group it was taken of, by
// name (the group itself is gone once the snapshot is taken; the name
// keys the driver's record of it).
type Group struct {
	ClusterID string
	Pool      string
	Group     string
}

// ValidClusterID reports whether s may be used as a clusterID.
func ValidClusterID(s string) error { return validPart("clusterID", s, MaxClusterIDLen) }

// ValidPool reports whether s may be used as a pool name in an ID.
func ValidPool(s string) error { return validPart("pool", s, MaxPoolLen) }

func validPart(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > max {
		return fmt.Errorf("%s %.50q is longer than %d bytes", what, s, max)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%s %.50q may only hold letters, digits, '-', '_' and '.'", what, s)
		}
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%s %q is not a valid name", what, s)
	}
	return nil
}

// String encodes the volume ID.
func (v Volume) String() string {
	return strings.Join([]string{volumePrefix, v.ClusterID, v.Pool, v.Image}, sep)
}

// Validate checks every part, so that String() is a valid ID.
func (v Volume) Validate() error {
	if err := ValidClusterID(v.ClusterID); err != nil {
		return err
	}
	if err := ValidPool(v.Pool); err != nil {
		return err
	}
	if err := validPart("image", v.Image, maxImageLen); err != nil {
		return err
	}
	if n := len(v.String()); n > MaxLen {
		return fmt.Errorf("volume ID %.50q... is %d bytes, over %d: use a shorter clusterID, pool or image name", v.String(), n, MaxLen)
	}
	return nil
}

// String encodes the snapshot ID.
func (s Snapshot) String() string {
	return strings.Join([]string{snapshotPrefix, s.ClusterID, s.Pool, s.ImageID, s.Snap}, sep)
}

// Validate checks every part, so that String() is a valid ID.
func (s Snapshot) Validate() error {
	if err := ValidClusterID(s.ClusterID); err != nil {
		return err
	}
	if err := ValidPool(s.Pool); err != nil {
		return err
	}
	if err := validPart("image id", s.ImageID, maxImageIDLen); err != nil {
		return err
	}
	return validPart("snapshot", s.Snap, maxSnapLen)
}

// String encodes the group snapshot ID.
func (g Group) String() string {
	return strings.Join([]string{groupPrefix, g.ClusterID, g.Pool, g.Group}, sep)
}

// Validate checks every part, so that String() is a valid ID.
func (g Group) Validate() error {
	if err := ValidClusterID(g.ClusterID); err != nil {
		return err
	}
	if err := ValidPool(g.Pool); err != nil {
		return err
	}
	return validPart("group", g.Group, maxGroupLen)
}

// DecodeGroup parses a group snapshot ID; any other string yields
// ErrMalformed.
func DecodeGroup(id string) (Group, error) {
	parts, err := split(id, groupPrefix, 4)
	if err != nil {
		return Group{}, err
	}
	g := Group{ClusterID: parts[1], Pool: parts[2], Group: parts[3]}
	if g.Validate() != nil {
		return Group{}, ErrMalformed
	}
	return g, nil
}

// DecodeVolume parses a volume ID; any other string yields ErrMalformed.
func DecodeVolume(id string) (Volume, error) {
	parts, err := split(id, volumePrefix, 4)
	if err != nil {
		return Volume{}, err
	}
	v := Volume{ClusterID: parts[1], Pool: parts[2], Image: parts[3]}
	if v.Validate() != nil {
		return Volume{}, ErrMalformed
	}
	return v, nil
}

// DecodeSnapshot parses a snapshot ID; any other string yields ErrMalformed.
func DecodeSnapshot(id string) (Snapshot, error) {
	parts, err := split(id, snapshotPrefix, 5)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{ClusterID: parts[1], Pool: parts[2], ImageID: parts[3], Snap: parts[4]}
	if s.Validate() != nil {
		return Snapshot{}, ErrMalformed
	}
	return s, nil
}

func split(id, prefix string, n int) ([]string, error) {
	if len(id) > MaxLen {
		return nil, ErrMalformed
	}
	parts := strings.Split(id, sep)
	if len(parts) != n || parts[0] != prefix {
		return nil, ErrMalformed
	}
	return parts, nil
}
