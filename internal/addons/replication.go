package addons

import (
	"context"
	"errors"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Replication is the csi-addons replication Controller service. Every
// call is idempotent: asked again, it finds its work done and answers as
// the first time did, changing nothing.
type Replication struct {
	replication.UnimplementedControllerServer
	volumes
}

// EnableVolumeReplication turns snapshot-based mirroring on and sets the
// class's schedule.
func (r *Replication) EnableVolumeReplication(ctx context.Context, req *replication.EnableVolumeReplicationRequest) (*replication.EnableVolumeReplicationResponse, error) {
	c := call{name: "EnableVolumeReplication", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets(), params: req.GetParameters(), parse: true}
	err := r.withVolume(ctx, c, func(v volume, params classParams) error {
		switch m := v.fam.Mirror; {
		case m == nil:
			if err := r.parentMirrored(ctx, v); err != nil {
				return err
			}
			err := r.o.Backend.EnableMirroring(ctx, v.pool, v.image())
			if errors.Is(err, rbd.ErrNotMirrored) {
				return status.Errorf(codes.FailedPrecondition, "%v: the pool must mirror images one by one (rbd mirror pool enable %s image) and be peered with the other site (docs/disaster-recovery.md)", err, v.pool.Name)
			}
			if err != nil {
				return cephStatus(err)
			}
		case m.Mode != rbd.MirrorModeSnapshot:
			return status.Errorf(codes.FailedPrecondition, "volume %s is mirrored in %s mode, set outside this driver, which mirrors by snapshots only", v.id, m.Mode)
		}
		if err := r.setSchedule(ctx, v, params.schedule); err != nil {
			return cephStatus(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &replication.EnableVolumeReplicationResponse{}, nil
}

// parentMirrored refuses a clone whose parent is not mirrored. It is
// refused rather than flattened: a flatten copies the parent's data into
// the volume, for a time that grows with the data, under a call the
// csi-addons controller bounds, and doubles the space the volume takes
// without anyone having asked; the admin flattens it knowingly instead.
// (The parent is the driver's own image or snapshot of another volume,
// which must not be mirrored on this one's behalf.)
func (r *Replication) parentMirrored(ctx context.Context, v volume) error {
	parent := v.fam.Parent
	if parent == nil {
		return nil
	}
	pf, err := r.o.Backend.StatFamily(ctx, v.pool.WithName(parent.Pool), "", parent.ImageID)
	if err == nil && pf.Mirror != nil {
		return nil
	}
	where := v.pool.Name + "/"
	if v.pool.Namespace != "" {
		where += v.pool.Namespace + "/"
	}
	return status.Errorf(codes.FailedPrecondition, "volume %s is a restore or a clone, and the image it reads through (%s/%s) is not mirrored: its copy on the peer would lack that data. "+
		"Flatten it first (rbd flatten %s%s), then enable replication again", v.id, parent.Pool, parent.Image, where, v.image())
}

// DisableVolumeReplication turns mirroring off at the primary, which makes
// rbd-mirror remove the peers' copies. A copy that is not primary is
// refused: turned off there, it would become a second image that silently
// parts from the primary.
func (r *Replication) DisableVolumeReplication(ctx context.Context, req *replication.DisableVolumeReplicationRequest) (*replication.DisableVolumeReplicationResponse, error) {
	c := call{name: "DisableVolumeReplication", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets()}
	err := r.withVolume(ctx, c, func(v volume, _ classParams) error {
		switch m := v.fam.Mirror; {
		case m == nil:
			return nil
		case !m.Primary:
			return status.Errorf(codes.FailedPrecondition, "volume %s is the non-primary copy on this site: disable replication at its primary (rbd-mirror then removes this copy), or promote this copy first", v.id)
		}
		if err := r.setSchedule(ctx, v, nil); err != nil {
			return cephStatus(err)
		}
		if err := r.o.Backend.DisableMirroring(ctx, v.pool, v.image()); err != nil {
			return cephStatus(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &replication.DisableVolumeReplicationResponse{}, nil
}

// DemoteVolume makes the primary copy non-primary. librbd takes a last
// mirror snapshot with everything written until then, which rbd-mirror
// copies to the peer: a promote there without force succeeds once it has
// arrived. A copy that is not primary is left as it is.
//
// rbd-mirror copies only from a primary: a peer that is not replaying
// this image when it is demoted never copies the demotion, and the writes
// since the last sync stay on this site, in a copy no promote without
// force takes. So the demote waits (Unavailable) until a peer's daemon
// reports it replaying, unless a peer is primary itself (the demotion
// then ends a split-brain, and this copy's writes are given up on
// purpose) or the call has force.
func (r *Replication) DemoteVolume(ctx context.Context, req *replication.DemoteVolumeRequest) (*replication.DemoteVolumeResponse, error) {
	c := call{name: "DemoteVolume", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets(), mirrored: true}
	err := r.withVolume(ctx, c, func(v volume, _ classParams) error {
		if !v.fam.Mirror.Primary {
			return nil
		}
		if !req.GetForce() {
			st, err := r.o.Backend.MirrorStatus(ctx, v.pool, v.image())
			if err != nil {
				return cephStatus(err)
			}
			if !peerPulls(st, v.fam.Mirror) {
				return status.Errorf(codes.Unavailable, "volume %s: no peer's rbd-mirror reports replaying this image yet (%s): demoted now, the writes since its last sync would stay here, where no peer copies them; "+
					"retry once a peer replays it (force demotes anyway)", v.id, peerStates(st))
			}
		}
		if err := r.o.Backend.DemoteImage(ctx, v.pool, v.image()); err != nil {
			return cephStatus(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &replication.DemoteVolumeResponse{}, nil
}
