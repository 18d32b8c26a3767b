package controller

// QoS: a volume's I/O limits, written on its image where librbd clients
// (rbd-nbd, rbd-fuse) read them as per-image config overrides, plus the
// policy they came from, so that expansion can recompute size-based
// limits and ControllerModifyVolume can change some keys and keep the
// rest. krbd does not read them: ControllerPublishVolume hands them to the
// node, which sets them in the pod's cgroup (node/qos.go).

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// mutableParams checks mutable parameters: the QoS keys, and a sparsify
// request (sparsify.go; "" if none).
func mutableParams(mutable map[string]string) (q config.QoS, sparsify string, err error) {
	qos := map[string]string{}
	for k, v := range mutable {
		switch {
		case config.IsQoSParam(k):
			qos[k] = v
		case k == config.ParamSparsify:
			if err := config.ValidSparsifyRequest(v); err != nil {
				return nil, "", status.Error(codes.InvalidArgument, err.Error())
			}
			sparsify = v
		default:
			return nil, "", status.Errorf(codes.InvalidArgument, "mutable parameter %.60q cannot be changed; these can: %s, %s", k, config.ParamSparsify, config.QoSParamNames())
		}
	}
	if q, err = config.ParseQoS(qos); err != nil {
		return nil, "", status.Error(codes.InvalidArgument, err.Error())
	}
	return q, sparsify, nil
}

// ControllerModifyVolume changes a volume's QoS parameters, and starts a
// sparsify a new sparsify value asks for. QoS keys the request does not
// name keep their values; librbd clients that have the image open pick the
// new limits up when they refresh it (docs/reference.md#qos).
func (c *Controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	update, sparsify, err := mutableParams(req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	vol, pool, release, err := c.lockVolume(id, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer release()
	info, err := c.stat(ctx, pool, vol)
	if err != nil {
		return nil, err
	}
	current, err := c.names.Volume(vol.Image, info.Metadata).QoSPolicy()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", id, err)
	}
	merged, err := current.Merge(update)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", id, err)
	}
	if err := c.setChanged(ctx, pool, vol.Image, info.Metadata, records.QoSMetadata(merged, info.Size)); err != nil {
		return nil, c.writeStatus(pool, fmt.Errorf("setting the QoS of volume %s: %w", id, err))
	}
	klog.V(2).InfoS("modified volume", "volumeID", id, "qos", merged.String())
	if sparsify != "" {
		if err := c.requestSparsify(ctx, pool, vol, sparsify); err != nil {
			return nil, err
		}
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// resizeQoS recomputes a grown volume's size-based limits.
func (c *Controller) resizeQoS(ctx context.Context, pool rbd.Pool, image string, info rbd.ImageInfo, size uint64) error {
	q, err := c.names.Volume(image, info.Metadata).QoSPolicy()
	if err != nil || !q.SizeDependent() {
		return err
	}
	return c.setChanged(ctx, pool, image, info.Metadata, q.Limits(size))
}

// setChanged writes the keys of meta whose values the image does not have
// yet (have): a retried call, or one that changes nothing (the CO sends a
// VolumeAttributesClass's every parameter, and retries a running
// sparsify), writes nothing, and so succeeds on a full pool too.
func (c *Controller) setChanged(ctx context.Context, pool rbd.Pool, image string, have, meta map[string]string) error {
	changed := map[string]string{}
	for k, v := range meta {
		if have[k] != v {
			changed[k] = v
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return c.backend.SetMetadata(ctx, pool, image, changed)
}
