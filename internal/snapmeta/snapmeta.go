// Package snapmeta serves the CSI SnapshotMetadata service: which extents
// of a snapshot hold data, and which changed between two snapshots of one
// volume, so a backup reads only those. It is a thin translation onto the
// storage contract's Diff (internal/rbd): our snapshots are snapshots of
// the volume's own image, so a delta is one diff between two of them.
package snapmeta

import (
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

const (
	// DefaultPage is how many extents one Diff call gathers, the most a
	// walk holds at once (24 bytes each): a thin image, however large, is
	// one call, which opens the image once; a walk over an image written
	// in many small pieces asks again every DefaultPage extents.
	DefaultPage = 4096
	// DefaultMaxResults is the tuples per response when the request sets
	// no max_results: 24 bytes each on the wire.
	DefaultMaxResults = 1024
)

// Options configure a Server.
type Options struct {
	Backend rbd.Backend
	// Pool resolves the pool a snapshot is in, with the request's
	// credentials or the controller's own; its errors are gRPC statuses.
	Pool  func(clusterID, pool string, secrets map[string]string) (rbd.Pool, error)
	Names records.Names
	// Page overrides DefaultPage (tests make it small).
	Page int
}

// Server implements csi.SnapshotMetadataServer.
type Server struct {
	csi.UnimplementedSnapshotMetadataServer
	o Options
}

// New returns a Server.
func New(o Options) *Server {
	if o.Page <= 0 {
		o.Page = DefaultPage
	}
	return &Server{o: o}
}

// GetMetadataAllocated streams the extents of a snapshot that hold data,
// the data its volume reads from a parent (a restore, a clone) included.
func (s *Server) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	if req.GetSnapshotId() == "" {
		return status.Error(codes.InvalidArgument, "snapshot_id is missing")
	}
	if err := checkPaging(req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	ctx := stream.Context()
	t, err := s.find(ctx, req.GetSnapshotId(), req.GetSecrets(), "snapshot")
	if err != nil {
		return err
	}
	return s.walk(ctx, t, nil, req.GetStartingOffset(), req.GetMaxResults(), func(size int64, b []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{BlockMetadataType: csi.BlockMetadataType_VARIABLE_LENGTH, VolumeCapacityBytes: size, BlockMetadata: b})
	})
}

// GetMetadataDelta streams the extents that changed from the base
// snapshot to the target, a later one of the same volume; ranges that
// became zeros are among them.
func (s *Server) GetMetadataDelta(req *csi.GetMetadataDeltaRequest, stream csi.SnapshotMetadata_GetMetadataDeltaServer) error {
	switch {
	case req.GetBaseSnapshotId() == "":
		return status.Error(codes.InvalidArgument, "base_snapshot_id is missing")
	case req.GetTargetSnapshotId() == "":
		return status.Error(codes.InvalidArgument, "target_snapshot_id is missing")
	}
	if err := checkPaging(req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	ctx := stream.Context()
	t, err := s.find(ctx, req.GetTargetSnapshotId(), req.GetSecrets(), "target snapshot")
	if err != nil {
		return err
	}
	base, err := s.find(ctx, req.GetBaseSnapshotId(), req.GetSecrets(), "base snapshot")
	if err != nil {
		return err
	}
	switch {
	case base.id.ClusterID != t.id.ClusterID || base.pool != t.pool || base.image != t.image:
		return status.Errorf(codes.InvalidArgument, "base snapshot %s and target snapshot %s are snapshots of different volumes: a delta is between two snapshots of one volume", base.id, t.id)
	case base.order >= t.order:
		return status.Errorf(codes.InvalidArgument, "base snapshot %s was not taken before target snapshot %s", base.id, t.id)
	}
	return s.walk(ctx, t, &base, req.GetStartingOffset(), req.GetMaxResults(), func(size int64, b []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataDeltaResponse{BlockMetadataType: csi.BlockMetadataType_VARIABLE_LENGTH, VolumeCapacityBytes: size, BlockMetadata: b})
	})
}

// checkPaging refuses a negative offset (OutOfRange, as the spec's table
// says) or max_results.
func checkPaging(offset int64, maxResults int32) error {
	if offset < 0 {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is negative", offset)
	}
	if maxResults < 0 {
		return status.Errorf(codes.InvalidArgument, "max_results %d is negative", maxResults)
	}
	return nil
}

// diffStatus: a snapshot that went while the walk ran is NotFound.
func diffStatus(id volid.Snapshot, err error) error {
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) {
		return status.Errorf(codes.NotFound, "snapshot %s: %v", id, err)
	}
	return cephStatus(err)
}

func cephStatus(err error) error {
	return grpcerr.Table{
		{Err: rbd.ErrUnavailable, Code: codes.Unavailable},
		{Err: rbd.ErrPermission, Code: codes.PermissionDenied},
		{Err: rbd.ErrInvalid, Code: codes.InvalidArgument},
		// A delta from a group snapshot's member on a librbd without
		// diffs by snapshot ID (before Squid 19).
		{Err: rbd.ErrNotSupported, Code: codes.FailedPrecondition},
	}.Status(err)
}
