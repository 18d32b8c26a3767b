// Package controller implements the CSI Controller service on RBD images:
// create, delete, expand, list and capacity, idempotent by request name.
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Backend is the Ceph side the controller needs; internal/rbd implements it.
type Backend interface {
	CreateImage(ctx context.Context, p rbd.Pool, name string, spec rbd.ImageSpec) error
	Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error)
	Resize(ctx context.Context, p rbd.Pool, name string, size uint64) error
	RemoveImage(ctx context.Context, p rbd.Pool, name string) error
	ListImages(ctx context.Context, p rbd.Pool) ([]string, error)
	ListPools(ctx context.Context, monHost string, cred config.Credentials) ([]string, error)
	PoolAvailable(ctx context.Context, p rbd.Pool) (int64, error)
}

// Clusters resolves a clusterID to its monitors.
type Clusters interface {
	Lookup(clusterID string) (config.Cluster, error)
	All() []config.Cluster
}

// Image metadata keys the controller keeps on each volume's image.
const (
	// metaName holds the CreateVolume request name. Its presence marks the
	// image as finished: an image without it is the remains of a crash.
	metaName = "rbdcsi.name"
)

// volumePrefix starts the name of every image this driver creates.
const volumePrefix = "csi-vol-"

// Options configure a Controller.
type Options struct {
	Backend  Backend
	Clusters Clusters
	// Credentials serve the calls that carry no secrets (ListVolumes,
	// GetCapacity, ControllerGetVolume). Nil: those are not offered.
	Credentials *config.Credentials
}

// Controller is the CSI Controller service.
type Controller struct {
	csi.UnimplementedControllerServer

	backend  Backend
	clusters Clusters
	cred     *config.Credentials
	locks    *lock.Keyed
}

// New returns a Controller.
func New(o Options) *Controller {
	return &Controller{backend: o.Backend, clusters: o.Clusters, cred: o.Credentials, locks: lock.New()}
}

// imageName derives the image name from the request name, so a retried
// CreateVolume finds the image its earlier attempt made without any
// separate journal: one Ceph round trip fewer per create, nothing else to
// keep consistent. 80 bits of hash; the stored request name catches a
// collision.
func imageName(requestName string) string {
	sum := sha256.Sum256([]byte(requestName))
	return volumePrefix + hex.EncodeToString(sum[:10])
}

func isVolumeImage(name string) bool {
	return strings.HasPrefix(name, volumePrefix) && len(name) == len(volumePrefix)+20
}

// ControllerGetCapabilities advertises only what works: the list, capacity
// and get calls need controller credentials, since they carry no secrets.
func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if c.cred != nil {
		caps = append(caps,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
			csi.ControllerServiceCapability_RPC_GET_CAPACITY,
			csi.ControllerServiceCapability_RPC_GET_VOLUME,
		)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}
