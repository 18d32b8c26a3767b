package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/upkeep"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// ValidateVolumeCapabilities confirms the capabilities an existing volume
// can be used with.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are missing")
	}
	vol, err := c.checkVolumeContext(id, req.GetVolumeContext())
	if err != nil {
		return nil, err
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	v := c.names.Volume(vol.Image, info.Metadata)
	if why := contextEncryptionMismatch(req.GetVolumeContext(), v); why != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	if len(req.GetParameters()) > 0 {
		p, err := config.ParseParams(req.GetParameters())
		if err == nil {
			_, err = p.VolumeFeatures(multiWriter(req.GetVolumeCapabilities()...))
		}
		if encrypted := v.Encrypted(); err == nil && p.Encryption.Enabled != encrypted {
			err = fmt.Errorf("parameter %s is %t, and the volume is encrypted: %t", config.ParamEncrypted, p.Encryption.Enabled, encrypted)
		}
		if err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ListVolumes pages through the volumes of every pool of every cluster the
// controller credentials can read, in volume ID order. The token is the
// last ID of the previous page, so volumes created or deleted between
// pages neither repeat nor shift the listing. The first page lists every
// pool; the pages after it take the IDs that listing left (pages.go) and
// read only their own volumes.
func (c *Controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if c.cred == nil {
		return nil, status.Error(codes.Unimplemented, "ListVolumes needs controller credentials (--controller-secret-dir)")
	}
	after := req.GetStartingToken()
	ids, ok, err := c.volumesAfter(ctx, "", req.GetMaxEntries(), after)
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{}
	limit := int(req.GetMaxEntries())
	for len(ids) > 0 {
		// The entries still wanted, read at once; volumes deleted since
		// the names were listed (or unfinished) leave room for the next.
		batch := ids
		if limit > 0 {
			batch = ids[:min(len(ids), limit-len(resp.Entries))]
		}
		entries := make([]*csi.ListVolumesResponse_Entry, len(batch))
		err := readAll(ctx, len(batch), func(ctx context.Context, i int) error {
			vol := batch[i]
			pool, err := c.pool(vol.ClusterID, vol.Pool, nil)
			if err != nil {
				return err
			}
			info, err := c.stat(ctx, pool, vol)
			if status.Code(err) == codes.NotFound {
				return nil
			}
			if err != nil {
				return err
			}
			entries[i] = &csi.ListVolumesResponse_Entry{
				Volume: &csi.Volume{VolumeId: vol.String(), CapacityBytes: int64(info.Size)},
				Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: attach.Nodes(info.Metadata, info.ID)},
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e != nil {
				resp.Entries = append(resp.Entries, e)
			}
		}
		ids = ids[len(batch):]
		if limit > 0 && len(resp.Entries) == limit {
			if len(ids) > 0 {
				resp.NextToken = resp.Entries[limit-1].Volume.VolumeId
				c.volPages.put("", resp.NextToken, ids)
			}
			break
		}
	}
	if ok && resp.NextToken == "" {
		c.volPages.drop("", after)
	}
	return resp, nil
}

// listReads bounds the image reads one listing call makes at once: a
// page's entries are read side by side, not one round trip after the
// other.
const listReads = 8

// readAll runs read(i) for every i in [0, n), listReads at a time; the
// first error stops the reads not yet started and is returned.
func readAll(parent context.Context, n int, read func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(parent)
	g.SetLimit(listReads)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		g.Go(func() error { return read(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if parent.Err() != nil {
		// Ended before a read could fail: the page is not whole.
		return status.FromContextError(parent.Err()).Err()
	}
	return nil
}

// volumesAfter checks a volume listing's max_entries and starting token
// and returns the volume IDs after the token: what the page before left
// for it (pages.go, under scope), or, at the first page or for a token
// not held, a walk of every pool. cached says which.
func (c *Controller) volumesAfter(ctx context.Context, scope string, maxEntries int32, after string) (ids []volid.Volume, cached bool, err error) {
	if maxEntries < 0 {
		return nil, false, status.Errorf(codes.InvalidArgument, "max_entries must not be negative, got %d", maxEntries)
	}
	if after != "" {
		if _, err := volid.DecodeVolume(after); err != nil {
			return nil, false, status.Errorf(codes.Aborted, "starting token %.130q was not returned by this driver; start the listing again", after)
		}
	}
	ids, cached = c.volPages.get(scope, after)
	if cached && after != "" {
		return ids, true, nil
	}
	all, err := c.volumeIDs(ctx)
	if err != nil {
		return nil, false, err
	}
	return all[sort.Search(len(all), func(i int) bool { return all[i].String() > after }):], cached, nil
}

// volumeIDs lists every volume image, sorted by ID. Pools the controller's
// user may not read are skipped: they hold no volumes it could serve.
func (c *Controller) volumeIDs(ctx context.Context) ([]volid.Volume, error) {
	var ids []volid.Volume
	for _, cl := range c.clusters.All() {
		pools, err := upkeep.OwnPools(ctx, c.backend, cl, *c.cred)
		if err != nil {
			return nil, cephStatus(err)
		}
		for _, pool := range pools {
			names, err := c.backend.ListImages(ctx, pool)
			if errors.Is(err, rbd.ErrPermission) || errors.Is(err, rbd.ErrPoolNotFound) {
				klog.V(4).InfoS("skipping pool", "cluster", cl.ClusterID, "pool", pool.Name, "err", err)
				continue
			}
			if err != nil {
				return nil, cephStatus(err)
			}
			for _, n := range names {
				if c.names.IsVolumeImage(n) {
					ids = append(ids, volid.Volume{ClusterID: cl.ClusterID, Pool: pool.Name, Image: n})
				}
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids, nil
}

// GetCapacity reports the bytes still writable in the StorageClass's pool.
// Without a pool there is no single answer, and it reports none (0).
func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if c.cred == nil {
		return nil, status.Error(codes.Unimplemented, "GetCapacity needs controller credentials (--controller-secret-dir)")
	}
	resp := &csi.GetCapacityResponse{
		MaximumVolumeSize: wrapperspb.Int64(MaxSize),
		MinimumVolumeSize: wrapperspb.Int64(mib),
	}
	if caps := req.GetVolumeCapabilities(); len(caps) > 0 {
		if err := checkCapabilities(caps); err != nil {
			return resp, nil // no capacity for what cannot be served
		}
	}
	if len(req.GetParameters()) == 0 {
		return resp, nil
	}
	params, err := config.ParseParams(req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	pool, err := c.pool(params.ClusterID, params.Pool, nil)
	if err != nil {
		return nil, err
	}
	avail, err := c.backend.PoolAvailable(ctx, pool)
	if err != nil {
		if errors.Is(err, rbd.ErrPoolNotFound) {
			return nil, status.Errorf(codes.InvalidArgument, "pool %q does not exist in cluster %q", params.Pool, params.ClusterID)
		}
		return nil, cephStatus(err)
	}
	resp.AvailableCapacity = avail
	return resp, nil
}

// ControllerGetVolume reports a volume's size.
func (c *Controller) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if c.cred == nil {
		return nil, status.Error(codes.Unimplemented, "ControllerGetVolume needs controller credentials (--controller-secret-dir)")
	}
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	// Ours or a static volume's: the ID is all this call carries.
	vol, pool, err := c.volumeAt(id, nil)
	if err != nil {
		return nil, err
	}
	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: &csi.Volume{VolumeId: id, CapacityBytes: int64(info.Size)},
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: attach.Nodes(info.Metadata, info.ID)},
	}, nil
}
