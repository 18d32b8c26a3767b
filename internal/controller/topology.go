package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// placement is where a volume of a class with topologyConstrainedPools
// goes, and the topology it is accessible from.
type placement struct {
	pool       config.TopologyPool
	accessible []*csi.Topology
}

// placeByTopology picks the pool of a new volume of a class with
// topologyConstrainedPools (nil for other classes): a restore or clone
// stays in its source's pool; any other volume goes to the first pool
// serving one of the preferred topologies, then of the requisite ones.
// image is the volume's image name: a volume an earlier attempt already
// made in one of the pools stays there, whatever this request's order.
func (c *Controller) placeByTopology(ctx context.Context, params config.Params, req *csi.CreateVolumeRequest, image string) (*placement, error) {
	if params.TopologyPools == nil {
		return nil, nil
	}
	reqs := req.GetAccessibilityRequirements()
	if cs := req.GetVolumeContentSource(); cs != nil {
		return c.placeWithSource(params, reqs, cs)
	}
	wanted := slices.Concat(reqs.GetPreferred(), reqs.GetRequisite())
	chosen := c.firstServing(params.TopologyPools, wanted)
	skip := "" // CreateImage finds an image in the chosen pool itself
	if chosen != nil {
		skip = chosen.PoolName
	}
	existing, err := c.alreadyPlaced(ctx, params, req.GetSecrets(), image, skip)
	switch {
	case err != nil:
		return nil, err
	case existing != nil && !servesAny(c.opts.DriverName, *existing, reqs.GetRequisite()):
		return nil, status.Errorf(codes.AlreadyExists, "volume %s already exists in pool %s, which serves %s, outside the requested topology %s", req.GetName(), existing.PoolName, segmentsText(existing.Segments(c.opts.DriverName)), topologiesText(reqs.GetRequisite()))
	case existing != nil:
		return c.placed(existing), nil
	case chosen != nil:
		return c.placed(chosen), nil
	case len(wanted) == 0 && params.Pool == "":
		return nil, status.Errorf(codes.InvalidArgument, "the request carries no topology, and the StorageClass names no %s for such requests besides its %s (do the node plugins report --domain-labels?)", config.ParamPool, config.ParamTopologyConstrainedPools)
	case len(wanted) == 0:
		return nil, nil
	}
	return nil, status.Errorf(codes.ResourceExhausted, "no pool of the StorageClass's %s serves the requested topology %s (keys are topology.%s/<domainLabel>)", config.ParamTopologyConstrainedPools, topologiesText(wanted), c.opts.DriverName)
}

// firstServing is the first pool serving the first topology any pool
// serves, in the CO's order (preferred, then requisite).
func (c *Controller) firstServing(pools []config.TopologyPool, wanted []*csi.Topology) *config.TopologyPool {
	for _, want := range wanted {
		for i := range pools {
			if pools[i].Serves(c.opts.DriverName, want.GetSegments()) {
				return &pools[i]
			}
		}
	}
	return nil
}

func (c *Controller) placed(p *config.TopologyPool) *placement {
	if p == nil {
		return nil
	}
	return &placement{pool: *p, accessible: []*csi.Topology{{Segments: p.Segments(c.opts.DriverName)}}}
}

// placeWithSource keeps a restore or clone in its source's pool, which
// must be one of the class's and serve a requisite topology. A malformed
// source is NotFound, as it is without topology.
func (c *Controller) placeWithSource(params config.Params, reqs *csi.TopologyRequirement, cs *csi.VolumeContentSource) (*placement, error) {
	var srcPool string
	if snap := cs.GetSnapshot(); snap != nil {
		id, err := volid.DecodeSnapshot(snap.GetSnapshotId())
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "snapshot %.130q does not exist", snap.GetSnapshotId())
		}
		srcPool = id.Pool
	} else if vol := cs.GetVolume(); vol != nil {
		id, err := volid.DecodeVolume(vol.GetVolumeId())
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %.130q does not exist", vol.GetVolumeId())
		}
		srcPool = id.Pool
	} else {
		return nil, status.Error(codes.InvalidArgument, "volume content source names neither a snapshot nor a volume")
	}
	for _, p := range params.TopologyPools {
		if p.PoolName != srcPool {
			continue
		}
		if !servesAny(c.opts.DriverName, p, reqs.GetRequisite()) {
			return nil, status.Errorf(codes.ResourceExhausted, "a restore or clone stays in its source's pool %s, which serves %s, not the requested topology %s", srcPool, segmentsText(p.Segments(c.opts.DriverName)), topologiesText(reqs.GetRequisite()))
		}
		return c.placed(&p), nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "a restore or clone stays in its source's pool %s, which is not among the StorageClass's %s; use a class that lists it", srcPool, config.ParamTopologyConstrainedPools)
}

// alreadyPlaced finds the pool, other than skip, an earlier attempt
// created the image in.
func (c *Controller) alreadyPlaced(ctx context.Context, params config.Params, secrets map[string]string, image, skip string) (*config.TopologyPool, error) {
	for _, p := range params.TopologyPools {
		if p.PoolName == skip {
			continue
		}
		pool, err := c.pool(params.ClusterID, p.PoolName, secrets)
		if err != nil {
			return nil, err
		}
		_, err = c.backend.Stat(ctx, pool, image)
		switch {
		case err == nil:
			return &p, nil
		case errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound):
		default:
			return nil, cephStatus(fmt.Errorf("looking for volume image %s in pool %s: %w", image, p.PoolName, err))
		}
	}
	return nil, nil
}

// servesAny: the pool serves one of the topologies, or none is required.
func servesAny(driverName string, p config.TopologyPool, topologies []*csi.Topology) bool {
	if len(topologies) == 0 {
		return true
	}
	for _, t := range topologies {
		if p.Serves(driverName, t.GetSegments()) {
			return true
		}
	}
	return false
}

func topologiesText(ts []*csi.Topology) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, segmentsText(t.GetSegments()))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " or ")
}

func segmentsText(seg map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(seg)) {
		parts = append(parts, k+"="+seg[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
