package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// healthDoc is the operations guide's section on what each health reason
// means and how to repair it.
const healthDoc = "docs/operations.md#volume-health"

// Health reasons, as the CSI spec asks: CamelCase, one per condition.
const (
	ReasonImageMissing     = "ImageMissing"
	ReasonPoolMissing      = "PoolMissing"
	ReasonPoolFull         = "PoolFull"
	ReasonPoolNearFull     = "PoolNearFull"
	ReasonPGsInactive      = "PlacementGroupsInactive"
	ReasonNodeFenced       = "NodeFenced"
	ReasonMirrorSplitBrain = "MirrorSplitBrain"
	ReasonMirrorError      = "MirrorError"
	ReasonMirrorNotSyncing = "MirrorNotSyncing"
)

// ControllerGetVolumeHealth reports what Ceph knows to be wrong with a
// volume, each condition with what to do about it; an empty list when
// nothing is. A Ceph that does not answer is an error, not a condition:
// the controller cannot tell the volume's state from its own link's.
func (c *Controller) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	if c.cred == nil && len(req.GetSecrets()) == 0 {
		return nil, status.Error(codes.Unimplemented, "ControllerGetVolumeHealth needs controller credentials (--controller-secret-dir) or secrets in the call")
	}
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	vol, pool, err := c.volumeAt(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	fences, err := c.volumeFences(ctx)
	if err != nil {
		return nil, err
	}
	h := healthCheck{c: c, fences: fences, pools: map[string]rbd.PoolHealth{}}
	health, _, err := h.volume(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: health}, nil
}

// ControllerListVolumeHealth pages through the volumes that have a
// condition, in volume ID order, as ListVolumes does through all of them.
// The pool flags and the fence records are read once per call.
func (c *Controller) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	if c.cred == nil {
		// It lists every pool the controller's own user can read.
		return nil, status.Error(codes.Unimplemented, "ControllerListVolumeHealth needs controller credentials (--controller-secret-dir)")
	}
	// The pools are walked once per listing, as ListVolumes does (pages).
	after := req.GetStartingToken()
	scope := "health\x00" + pagesScope(req.GetSecrets())
	ids, cached, err := c.volumesAfter(ctx, scope, req.GetMaxEntries(), after)
	if err != nil {
		return nil, err
	}
	fences, err := c.volumeFences(ctx)
	if err != nil {
		return nil, err
	}
	h := healthCheck{c: c, fences: fences, pools: map[string]rbd.PoolHealth{}}
	resp := &csi.ControllerListVolumeHealthResponse{}
	for i, vol := range ids {
		if req.GetMaxEntries() > 0 && len(resp.Entries) == int(req.GetMaxEntries()) {
			resp.NextToken = resp.Entries[len(resp.Entries)-1].VolumeId
			c.volPages.put(scope, resp.NextToken, ids[i:])
			break
		}
		pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets())
		if err != nil {
			return nil, err
		}
		health, gone, err := h.volume(ctx, pool, vol)
		if err != nil {
			return nil, err
		}
		if !gone && len(health.HealthStatuses) > 0 {
			resp.Entries = append(resp.Entries, health)
		}
	}
	if cached && resp.NextToken == "" {
		c.volPages.drop(scope, after)
	}
	return resp, nil
}

// volumeFences reads the fence records of every node, by volume ID; none
// when attachments are not offered.
func (c *Controller) volumeFences(ctx context.Context) (map[string]map[string]nodereg.Fence, error) {
	if c.nodes == nil {
		return nil, nil
	}
	f, err := c.nodes.VolumeFences(ctx)
	if err != nil {
		return nil, cephStatus(fmt.Errorf("reading the fence records of the node registry: %w", err))
	}
	return f, nil
}

// healthCheck judges volumes, reading each pool's flags once.
type healthCheck struct {
	c      *Controller
	fences map[string]map[string]nodereg.Fence
	pools  map[string]rbd.PoolHealth // by cluster ID and pool name
}

// volume gathers a volume's conditions. gone is true when its image is
// not in the pool (reported as ImageMissing: a listing skips it, since the
// image was deleted after the pool was listed).
func (h *healthCheck) volume(ctx context.Context, pool rbd.Pool, vol volid.Volume) (health *csi.VolumeHealth, gone bool, err error) {
	id := vol.String()
	health = &csi.VolumeHealth{VolumeId: id}
	add := func(s csi.VolumeHealthErrorType, reason, format string, args ...any) {
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: s, Reason: reason, Message: fmt.Sprintf(format, args...) + " (" + healthDoc + ")",
		})
	}
	key := vol.ClusterID + "/" + vol.Pool
	ph, ok := h.pools[key]
	if !ok {
		ph, err = h.c.backend.PoolHealth(ctx, pool)
		if err != nil {
			return nil, false, cephStatus(fmt.Errorf("reading the flags of pool %s: %w", pool.Name, err))
		}
		h.pools[key] = ph
	}
	switch {
	case ph.Quota:
		add(csi.VolumeHealthErrorType_INACCESSIBLE, ReasonPoolFull, "pool %s has reached its quota: writes to the volume wait until space is freed or the quota is raised (ceph osd pool set-quota %s max_bytes|max_objects N)", pool.Name, pool.Name)
	case ph.Full:
		add(csi.VolumeHealthErrorType_INACCESSIBLE, ReasonPoolFull, "an OSD that pool %s maps to is full: writes to the volume wait until space is freed or OSDs are added (ceph health detail)", pool.Name)
	case ph.NearFull:
		add(csi.VolumeHealthErrorType_DEGRADED, ReasonPoolNearFull, "an OSD that pool %s maps to is nearly full: once it is full, writes to the volume wait (ceph health detail)", pool.Name)
	}

	if ph.InactivePGs > 0 {
		// Reading the image would wait on those placement groups too.
		add(csi.VolumeHealthErrorType_INACCESSIBLE, ReasonPGsInactive, "%d placement groups of pool %s have been inactive for over a minute (state %s): reads and writes of the volume's data in them wait until Ceph makes them active again (ceph health detail)",
			ph.InactivePGs, pool.Name, ph.InactiveState)
		return health, false, nil
	}
	info, err := h.c.backend.Stat(ctx, pool, vol.Image)
	switch {
	case errors.Is(err, rbd.ErrPoolNotFound):
		add(csi.VolumeHealthErrorType_INACCESSIBLE, ReasonPoolMissing, "pool %s (or its RADOS namespace) of cluster %s does not exist: was it deleted or renamed?", pool.Name, vol.ClusterID)
		return health, true, nil
	case errors.Is(err, rbd.ErrNotFound) || (err == nil && h.c.names.Volume(vol.Image, info.Metadata).State == records.Unfinished):
		add(csi.VolumeHealthErrorType_INACCESSIBLE, ReasonImageMissing, "image %s is not in pool %s: it was removed outside the driver, or moved to the RBD trash (rbd trash ls %s; rbd trash restore)", vol.Image, pool.Name, pool.Name)
		return health, true, nil
	case err != nil:
		return nil, false, cephStatus(err)
	}

	now := time.Now()
	fenced := h.fences[id]
	for _, node := range slices.Sorted(maps.Keys(fenced)) {
		f := fenced[node]
		if f.Expires.After(now) {
			add(csi.VolumeHealthErrorType_DEGRADED, ReasonNodeFenced, "node %s was fenced off the volume when it was detached while still mapping it: its clients %s are blocklisted until %s or until it unstages the volume; a pod there still using it gets I/O errors",
				node, strings.Join(f.Addrs, ", "), f.Expires.UTC().Format(time.RFC3339))
		}
	}
	if err := h.mirror(ctx, pool, vol, add); err != nil {
		return nil, false, err
	}
	return health, false, nil
}

// mirror adds the conditions rbd-mirror reports of a mirrored image: a
// split-brain (a peer's copy is primary too, or the copies diverged; only
// a resync asked for with force repairs it), an error, or a daemon that stopped reporting. States that
// pass by themselves (starting or stopping a replay, a sync in progress)
// are none.
func (h *healthCheck) mirror(ctx context.Context, pool rbd.Pool, vol volid.Volume, add func(csi.VolumeHealthErrorType, string, string, ...any)) error {
	mi, err := h.c.backend.MirrorInfo(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotMirrored) || errors.Is(err, rbd.ErrNotFound) || (err == nil && !mi.Enabled()) {
		return nil
	}
	if err != nil {
		return cephStatus(fmt.Errorf("reading the mirroring of image %s: %w", vol.Image, err))
	}
	st, err := h.c.backend.MirrorStatus(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotFound) {
		return nil
	}
	if err != nil {
		return cephStatus(fmt.Errorf("reading the mirror status of image %s: %w", vol.Image, err))
	}
	sites := append([]rbd.MirrorSiteStatus{st.Local}, st.Peers...)
	secondPrimary := mi.Primary && slices.ContainsFunc(st.Peers, func(p rbd.MirrorSiteStatus) bool { return p.SecondPrimary(mi) })
	switch {
	case secondPrimary || slices.ContainsFunc(sites, rbd.MirrorSiteStatus.SplitBrain):
		add(csi.VolumeHealthErrorType_DEGRADED, ReasonMirrorSplitBrain, "the copies of image %s on this site and its peer diverged (both were primary and written): rbd-mirror copies nothing until the copy to give up is resynced, which the driver does only when asked with force (VolumeReplication resync)", vol.Image)
	case slices.ContainsFunc(sites, func(s rbd.MirrorSiteStatus) bool { return s.Up && s.State == rbd.SiteError }):
		i := slices.IndexFunc(sites, func(s rbd.MirrorSiteStatus) bool { return s.Up && s.State == rbd.SiteError })
		add(csi.VolumeHealthErrorType_DEGRADED, ReasonMirrorError, "rbd-mirror reports an error for image %s: %q (rbd mirror image status %s/%s)", vol.Image, sites[i].Description, pool.Name, vol.Image)
	}
	// The daemon that copies into a copy reports it: this site's for a
	// non-primary copy, the peers' for the primary. A report marked down
	// is one whose daemon stopped; none at all is a mirroring just enabled.
	copiers := st.Peers
	if !mi.Primary {
		copiers = []rbd.MirrorSiteStatus{st.Local}
	}
	for _, s := range copiers {
		if !s.Up && s.State != "" && s.State != rbd.SiteUnknown {
			add(csi.VolumeHealthErrorType_DEGRADED, ReasonMirrorNotSyncing, "the rbd-mirror daemon that copies image %s into its non-primary copy stopped reporting (last %s): nothing written since reaches that copy until it runs again", vol.Image, s.LastUpdate.UTC().Format(time.RFC3339))
			break
		}
	}
	return nil
}
