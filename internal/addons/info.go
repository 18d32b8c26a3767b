package addons

import (
	"context"
	"fmt"
	"strings"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// GetVolumeReplicationInfo reports, at the primary, the last sync every
// peer completed and the state of replication. The last sync is the
// oldest of the peers' last completed mirror snapshots: each peer holds
// every write acknowledged before its time. No peer with a completed sync
// leaves the time unset; the status says why.
func (r *Replication) GetVolumeReplicationInfo(ctx context.Context, req *replication.GetVolumeReplicationInfoRequest) (*replication.GetVolumeReplicationInfoResponse, error) {
	resp := &replication.GetVolumeReplicationInfoResponse{}
	c := call{name: "GetVolumeReplicationInfo", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets(), mirrored: true}
	err := r.withVolume(ctx, c, func(v volume, _ classParams) error {
		if !v.fam.Mirror.Primary {
			return status.Errorf(codes.FailedPrecondition, "volume %s is the non-primary copy on this site: replication info is reported at the primary", v.id)
		}
		st, err := r.o.Backend.MirrorStatus(ctx, v.pool, v.image())
		if err != nil {
			return cephStatus(err)
		}
		resp.Status, resp.StatusMessage = health(st, v.fam.Mirror)
		var oldest *rbd.MirrorSync
		for _, p := range st.Peers {
			if ls, ok := p.LastSync(); ok && (oldest == nil || ls.SnapshotTime.Before(oldest.SnapshotTime)) {
				oldest = &ls
			}
		}
		if oldest != nil {
			resp.LastSyncTime = timestamppb.New(oldest.SnapshotTime)
			resp.LastSyncDuration = durationpb.New(oldest.Duration)
			resp.LastSyncBytes = oldest.Bytes
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// health judges the peers' reports, as seen from the primary: a second
// live primary or a diverged peer is an error (each needs an admin), a
// peer not replaying or not reporting makes replication degraded.
func health(st rbd.MirrorStatus, m *rbd.MirrorInfo) (replication.GetVolumeReplicationInfoResponse_Status, string) {
	if len(st.Peers) == 0 {
		return replication.GetVolumeReplicationInfoResponse_UNKNOWN, "no peer site has reported on this image yet (are the pools peered and rbd-mirror running on each site?)"
	}
	var errs, degraded, fine []string
	for _, p := range st.Peers {
		site := "peer " + p.MirrorUUID
		switch {
		case p.SecondPrimary(*m):
			errs = append(errs, fmt.Sprintf("split-brain: the copy at %s is primary too (%s): demote the copy whose writes are to be given up, then resync it with force", site, reported(p)))
		case p.ClaimsPrimary():
			degraded = append(degraded, fmt.Sprintf("%s has not reported since this copy became primary (%s)", site, reported(p)))
		case p.SplitBrain():
			errs = append(errs, fmt.Sprintf("the copy at %s diverged from this one (split-brain, %s): resync it there with force", site, reported(p)))
		case !p.Up:
			degraded = append(degraded, fmt.Sprintf("the rbd-mirror of %s does not report (%s)", site, reported(p)))
		case p.State != rbd.SiteReplaying:
			degraded = append(degraded, fmt.Sprintf("%s is %s (%s)", site, p.State, reported(p)))
		default:
			fine = append(fine, site+" is replaying")
		}
	}
	switch {
	case len(errs) > 0:
		return replication.GetVolumeReplicationInfoResponse_ERROR, strings.Join(append(errs, degraded...), "; ")
	case len(degraded) > 0:
		return replication.GetVolumeReplicationInfoResponse_DEGRADED, strings.Join(degraded, "; ")
	}
	return replication.GetVolumeReplicationInfoResponse_HEALTHY, strings.Join(fine, "; ")
}
