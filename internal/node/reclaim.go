package node

import (
	"context"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// TrimBlock is TrimVolume's result for a raw block volume: nothing done.
const TrimBlock = "block"

// TrimVolume trims one staged volume now: what the csi-addons
// NodeReclaimSpace asks for, through the same fstrim as TrimAll. It
// answers what a caller can act on: NotFound when the volume is not
// staged here (or not at stagingPath, when given), Aborted while another
// operation holds the volume, FailedPrecondition for a filesystem this
// node may not trim (shared with other nodes, read-only) or whose
// discards never reach Ceph (rbd-fuse). A raw block volume is no error
// and is left alone (Block set): its blocks belong to whatever the pod
// wrote there, and nothing short of discarding them (blkdiscard, which
// destroys the data) would free any.
func (n *Node) TrimVolume(ctx context.Context, volumeID, stagingPath string) (TrimResult, error) {
	if volumeID == "" {
		return TrimResult{}, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if stagingPath != "" && !filepath.IsAbs(stagingPath) {
		return TrimResult{}, status.Errorf(codes.InvalidArgument, "staging_target_path %.130q must be absolute", stagingPath)
	}
	release, ok := n.locks.TryLock("vol/" + volumeID)
	if !ok {
		return TrimResult{}, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress; retry later", volumeID)
	}
	defer release()
	rec, err := n.store.load(volumeID)
	if err != nil {
		return TrimResult{}, status.Errorf(codes.Internal, "reading the state of volume %s: %v", volumeID, err)
	}
	if rec == nil || !rec.Staged || (stagingPath != "" && filepath.Clean(stagingPath) != filepath.Clean(rec.StagingPath)) {
		where := ""
		if stagingPath != "" {
			where = " at " + stagingPath
		}
		return TrimResult{}, status.Errorf(codes.NotFound, "volume %s is not staged on this node%s", volumeID, where)
	}
	if rec.Cap.Block {
		return TrimResult{VolumeID: volumeID, Result: TrimBlock}, nil
	}
	if !trimmable(rec) {
		return TrimResult{}, status.Errorf(codes.FailedPrecondition, "volume %s is staged %s: only a filesystem one node alone writes is trimmed, by that node", volumeID, rec.Cap.AccessMode)
	}
	if rec.Mounter == mapper.Fuse {
		return TrimResult{}, status.Errorf(codes.FailedPrecondition, "volume %s is mapped with rbd-fuse, which passes no discards on to Ceph: a trim would free nothing (the controller's reclaim sparsifies it once it is detached)", volumeID)
	}
	r := n.trimStaged(ctx, volumeID, rec)
	switch r.Result {
	case TrimOK:
		return r, nil
	case TrimUnsupported:
		return r, status.Errorf(codes.FailedPrecondition, "volume %s: its device takes no discards, so a trim frees nothing", volumeID)
	}
	return r, status.Errorf(codes.Internal, "trimming volume %s: %v", volumeID, r.Err)
}
