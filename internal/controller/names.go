package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// How the driver names what it creates, and tells it from anything else
// in a pool.

// imageName derives the image name from the request name, so a retried
// CreateVolume finds the image its earlier attempt made without any
// separate journal: one Ceph round trip fewer per create, nothing else to
// keep consistent. 80 bits of hash; the stored request name catches a
// collision. prefix is volumePrefix or a StorageClass's volumeNamePrefix.
func imageName(prefix, requestName string) string {
	return prefix + hash(requestName, 10)
}

// namePrefixOf is the prefix a volume image was named with, as its
// metadata records it (volumePrefix when it records none).
func namePrefixOf(meta map[string]string) string {
	if p := meta[metaNamePrefix]; p != "" {
		return p
	}
	return volumePrefix
}

// finished reports whether a volume image is complete: it carries the
// request name it was made for. A clone inherits its parent's metadata, so
// a name that does not hash to this image's name is an inherited one, and
// the image is the unfinished remains of a crash.
func finished(meta map[string]string, image string) bool {
	owner := meta[metaName]
	return owner != "" && imageName(namePrefixOf(meta), owner) == image
}

// snapName derives the RBD snapshot name from the CreateSnapshot name.
func snapName(requestName string) string { return snapPrefix + hash(requestName, 8) }

func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:n])
}

// isVolumeImage tells the driver's volume images from anything else in a
// pool, including other drivers' images that share a prefix: the sweep
// removes unfinished ones, DeleteVolume finished ones.
func (c *Controller) isVolumeImage(name string) bool {
	for _, p := range c.namePrefixes {
		if h, ok := strings.CutPrefix(name, p); ok && len(h) == 20 && isLowerHex(h) {
			return true
		}
	}
	return false
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
	if !slices.Contains(c.namePrefixes, p.VolumeNamePrefix) {
		return "", status.Errorf(codes.InvalidArgument, "parameter %s: %q is not a prefix this driver's controller was started with; add it to its --volume-name-prefixes (it then treats every image so named as its own)", config.ParamVolumeNamePrefix, p.VolumeNamePrefix)
	}
	return p.VolumeNamePrefix, nil
}
