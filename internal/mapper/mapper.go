// Package mapper maps an RBD image to a local block device and back. One
// small interface, three implementations picked per volume by the
// StorageClass parameter "mounter":
//
//   - krbd: the kernel RBD client (`rbd device map`), the default and the
//     fastest; needs the rbd kernel module.
//   - nbd:  librbd in user space behind /dev/nbdX (`rbd device map -t nbd`);
//     needs the nbd kernel module.
//   - fuse: rbd-fuse exposes the image as a file, a loop device turns the file
//     into a block device; for kernels with neither module.
//
// Keys never reach a command line: they are written to 0600 files in a
// private directory and removed as soon as the tool has connected.
package mapper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// Names of the mappers, as the StorageClass parameter mounter spells them
// (config.Mounters; a test checks they agree).
const (
	KRBD = "krbd"
	NBD  = "nbd"
	Fuse = "fuse"
)

// Names are the mappers' names.
func Names() []string { return []string{KRBD, NBD, Fuse} }

// The StorageClass parameters errors point to (config.ParamMounter and
// config.ParamImageFeatures; a test checks they agree).
const (
	paramMounter       = "mounter"
	paramImageFeatures = "imageFeatures"
)

// Errors callers branch on; the wrapped message says what happened.
var (
	// ErrUnsupported: the mapper cannot work on this node (kernel module
	// or tool missing). Retrying will not help; another mounter might.
	ErrUnsupported = errors.New("mapper not supported on this node")
	// ErrNotFound: the image (or its pool) does not exist.
	ErrNotFound = errors.New("image not found")
	// ErrBusy: the device is still in use (mounted or open).
	ErrBusy = errors.New("device busy")
	// ErrUnavailable: the cluster did not answer (monitors unreachable).
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrPermission: Ceph refused the request's user (refused.go names
	// the user and the caps it needs).
	ErrPermission = errors.New("permission denied")
)

// Image names one RBD image. ClusterID only keeps the private paths of two
// clusters with equal pool and image names apart.
type Image struct {
	ClusterID string `json:"clusterID"`
	Pool      string `json:"pool"`
	// Namespace is the RADOS namespace in the pool ("" = default).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String is the image spec the rbd tool takes: pool[/namespace]/name.
func (i Image) String() string {
	if i.Namespace != "" {
		return i.Pool + "/" + i.Namespace + "/" + i.Name
	}
	return i.Pool + "/" + i.Name
}

// MapRequest is everything a mapping needs, secrets included. It lives for
// one call only and is never stored or logged.
type MapRequest struct {
	Image   Image
	MonHost string
	Cred    cluster.Credentials
	// Options are the mapOptions parameter: comma-separated key[=value]
	// for `rbd device map -o` (ignored by fuse, which has none).
	Options  string
	ReadOnly bool
	// Cookie names the mapping for a later re-attach (nbd: rbd-nbd's
	// --cookie; the others ignore it). Not a secret: it only keeps a new
	// daemon from attaching another image to the device.
	Cookie string
}

// UnmapRequest names what to unmap. Device may be empty (a crash before it
// was recorded): the mapper then finds the image's device itself.
type UnmapRequest struct {
	Image   Image
	Device  string
	Options string // unmapOptions
	// Fenced: the controller blocklisted this node's client of the image.
	// Nothing it still has to write can land, so a mapper may end a
	// client that waits on such writes (rbd-fuse) rather than wait for it.
	Fenced bool
}

// Mapped is one mapping found on the node.
type Mapped struct {
	Image  Image
	Device string
	// ClientAddr is a krbd mapping's kernel client as the OSDs see it
	// ("ip:port/nonce", what a blocklist entry names); "" for the other
	// mappers, and on kernels without the attribute.
	ClientAddr string
}

// Mapper maps images to block devices. Every method is idempotent and
// bounded by its context.
type Mapper interface {
	// Supported returns nil when the mapper can work on this node, else an
	// error wrapping ErrUnsupported that says what is missing. It is cheap
	// enough to call before every map.
	Supported(ctx context.Context) error
	// Map returns the block device of the image, mapping it if needed.
	Map(ctx context.Context, req MapRequest) (device string, err error)
	// Unmap removes the image's mapping; nothing mapped is a success.
	Unmap(ctx context.Context, req UnmapRequest) error
	// List returns the mappings this mapper has on the node.
	List(ctx context.Context) ([]Mapped, error)
	// Refresh makes the device show the image's current size, waiting (up
	// to ctx) until it reaches minBytes when that is > 0, and returns it.
	Refresh(ctx context.Context, device string, minBytes int64) (int64, error)
}

// Find returns the mapping of img in list, if any.
func Find(list []Mapped, img Image) (Mapped, bool) {
	for _, m := range list {
		if m.Image.Pool == img.Pool && m.Image.Name == img.Name &&
			(m.Image.ClusterID == "" || img.ClusterID == "" || m.Image.ClusterID == img.ClusterID) {
			return m, true
		}
	}
	return Mapped{}, false
}

// unsupported builds the error for a mapper that cannot work here, naming
// the alternatives so the message is actionable from `kubectl describe`.
func unsupported(name, why string) error {
	return fmt.Errorf("%w: mounter %q cannot work on this node: %s; choose another mounter with the StorageClass parameter %q (one of %s)",
		ErrUnsupported, name, why, paramMounter, strings.Join(Names(), ", "))
}
