package addons

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// PromoteVolume makes this site's copy the primary one.
//
// Without force, librbd promotes only a copy whose peer has demoted and
// whose demotion has arrived. Until then the answer depends on whether
// the peer's site is alive: if its rbd-mirror reports (the daemon's watch
// holds), the peer is reachable and the planned way is to wait for, or do,
// its demotion: Unavailable, which the csi-addons controller retries as
// is; so is a copy into which a sync is being written (the data comes from
// the peer). If no peer daemon reports, the primary cannot be reached and
// only a forced promote helps: FailedPrecondition, on which it retries with
// force. A forced promote over a peer whose daemon still reports its copy
// primary is refused: that peer takes writes the promoted copy would
// never hold.
func (r *Replication) PromoteVolume(ctx context.Context, req *replication.PromoteVolumeRequest) (*replication.PromoteVolumeResponse, error) {
	c := call{name: "PromoteVolume", id: req.GetVolumeId(), src: req.GetReplicationSource(), secrets: req.GetSecrets(), params: req.GetParameters(), parse: true, mirrored: true}
	err := r.withVolume(ctx, c, func(v volume, params classParams) error {
		if !v.fam.Mirror.Primary {
			if err := r.promote(ctx, v, req.GetForce()); err != nil {
				return err
			}
		}
		if err := r.setSchedule(ctx, v, params.schedule); err != nil {
			return cephStatus(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &replication.PromoteVolumeResponse{}, nil
}

// promote promotes a non-primary copy, judging by the daemons' reports
// what a refusal means.
func (r *Replication) promote(ctx context.Context, v volume, force bool) error {
	st, err := r.o.Backend.MirrorStatus(ctx, v.pool, v.image())
	if err != nil {
		return cephStatus(err)
	}
	if live, ok := livePrimary(st); force && ok {
		return status.Errorf(codes.FailedPrecondition, "volume %s: refusing to force the promote: the copy at peer %s is primary and its rbd-mirror is alive (last report %s): "+
			"demote it there and promote without force; force is for a primary that cannot be reached", v.id, live.MirrorUUID, reported(live))
	}
	if !force && v.fam.Mirror.DemotedHere {
		// librbd would promote it, with this site's old data: a peer
		// may have been promoted and written since, and its demotion
		// (which carries those writes) has not arrived.
		err = fmt.Errorf("%w: this site demoted the copy and nothing has arrived from the peer since", rbd.ErrBusy)
	} else {
		err = r.o.Backend.PromoteImage(ctx, v.pool, v.image(), force)
	}
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, rbd.ErrBusy):
		return cephStatus(err)
	case peerAlive(st) || errors.Is(err, rbd.ErrSyncRunning):
		// A sync being written into this copy comes from the peer: it
		// is reachable, whatever its daemon's last report says (after a
		// resync, Tentacle's reports lag the sync).
		return status.Errorf(codes.Unavailable, "volume %s: the peer's copy is not demoted yet, or its demotion is still on its way here: demote it there if it is not; this call succeeds once the demotion has arrived (%v)", v.id, err)
	}
	return status.Errorf(codes.FailedPrecondition, "volume %s: the peer's primary copy is not demoted and no rbd-mirror of its site reports: it cannot be reached. "+
		"Promoting needs force, and this copy then holds the data of the last mirror snapshot that arrived whole%s (%v)", v.id, lastSync(st.Local), err)
}

// livePrimary is a peer whose daemon is alive and says its copy is primary.
func livePrimary(st rbd.MirrorStatus) (rbd.MirrorSiteStatus, bool) {
	for _, p := range st.Peers {
		if p.ClaimsPrimary() {
			return p, true
		}
	}
	return rbd.MirrorSiteStatus{}, false
}

// peerAlive: some peer's daemon is alive (its report is up).
func peerAlive(st rbd.MirrorStatus) bool {
	for _, p := range st.Peers {
		if p.Up {
			return true
		}
	}
	return false
}

// peerPulls: a peer will copy this primary copy's demotion, its daemon
// alive and replaying the image, or the demotion ends a split-brain (a
// peer's copy is primary too).
func peerPulls(st rbd.MirrorStatus, m *rbd.MirrorInfo) bool {
	for _, p := range st.Peers {
		if p.SecondPrimary(*m) || (p.Up && p.State == rbd.SiteReplaying) {
			return true
		}
	}
	return false
}

// peerStates lists what the peers last reported, for messages.
func peerStates(st rbd.MirrorStatus) string {
	if len(st.Peers) == 0 {
		return "no peer has reported"
	}
	var out []string
	for _, p := range st.Peers {
		up := "down"
		if p.Up {
			up = "up"
		}
		out = append(out, fmt.Sprintf("peer %s: %s+%s, %s", p.MirrorUUID, up, p.State, reported(p)))
	}
	return strings.Join(out, "; ")
}

// reported says when a site last reported and what.
func reported(s rbd.MirrorSiteStatus) string {
	when := "never"
	if !s.LastUpdate.IsZero() {
		when = s.LastUpdate.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%q at %s", s.Description, when)
}

// lastSync names the last snapshot a copy holds whole, for messages.
func lastSync(s rbd.MirrorSiteStatus) string {
	if ls, ok := s.LastSync(); ok {
		return ", taken at " + ls.SnapshotTime.UTC().Format(time.RFC3339)
	}
	return ""
}
