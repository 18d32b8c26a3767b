package addons

import (
	"context"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// ResyncVolume answers whether a demoted copy is in step with the primary
// (ready), which the csi-addons controller asks over and over on every
// secondary, and replaces it with the primary's data only when both hold:
// its rbd-mirror, alive, reports it split-brained (it diverged from the
// primary: both were written as primary), and the call has force. A
// resync discards what only this copy holds, so it is never started on a
// state that may pass (a sync under way, a daemon not reporting yet), on
// another error, or without force. While rbd-mirror replaces the image
// (seconds), the volume reads as missing (NotFound), then not ready.
func (r *Replication) ResyncVolume(ctx context.Context, req *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	var ready bool
	c := call{name: "ResyncVolume", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets(), mirrored: true}
	err := r.withVolume(ctx, c, func(v volume, _ classParams) (err error) {
		ready, err = r.resync(ctx, v, req.GetForce())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &replication.ResyncVolumeResponse{Ready: ready}, nil
}

// resync judges a mirrored copy, and flags it for a resync where that
// is called for; it reports whether the copy is in step.
func (r *Replication) resync(ctx context.Context, v volume, force bool) (bool, error) {
	if v.fam.Mirror.Primary {
		return false, status.Errorf(codes.FailedPrecondition, "volume %s is the primary copy on this site: a resync replaces a demoted copy with the primary's data (demote this one first if the other site's copy is the one to keep)", v.id)
	}
	if v.fam.Mirror.ResyncRequested {
		// Asked before: rbd-mirror has yet to replace the copy.
		return false, nil
	}
	st, err := r.o.Backend.MirrorStatus(ctx, v.pool, v.image())
	if err != nil {
		return false, cephStatus(err)
	}
	local := st.Local
	switch {
	case local.SplitBrain() && !force:
		return false, status.Errorf(codes.FailedPrecondition, "volume %s diverged from the primary (rbd-mirror reports split-brain, %s): a resync replaces this copy with the primary's data and discards every write only this copy holds; "+
			"ask again with force (VolumeReplication replicationState: resync) once that is what you want", v.id, reported(local))
	case local.SplitBrain():
		if err := r.o.Backend.ResyncImage(ctx, v.pool, v.image()); err != nil {
			return false, cephStatus(err)
		}
		return false, nil
	case local.Up && local.State == rbd.SiteReplaying:
		return true, nil
	case local.Up && local.State == rbd.SiteError:
		return false, status.Errorf(codes.FailedPrecondition, "rbd-mirror reports an error on volume %s (%s) that is no split-brain: a resync is not what it needs, and is not done", v.id, reported(local))
	case !local.Up && !local.LastUpdate.IsZero():
		return false, status.Errorf(codes.FailedPrecondition, "the rbd-mirror daemon of this site that reported on volume %s is down (%s): start it again", v.id, reported(local))
	}
	// Starting, syncing, or not reported on yet: in step later.
	return false, nil
}
