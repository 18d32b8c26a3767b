package rbd

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MirrorBackend is RBD's snapshot-based mirroring of single images to the
// peer clusters of their pool (set up by an admin: the pool in image mode,
// peers bootstrapped, rbd-mirror daemons running). The image keeps its
// pool and name on every site; its RBD image ID differs. Only one site's
// copy is primary (written to); rbd-mirror copies each mirror snapshot of
// the primary into the others. Journal-based mirroring is not offered.
type MirrorBackend interface {
	// EnableMirroring turns on snapshot-based mirroring of the image,
	// which takes its first mirror snapshot. An image mirrored already in
	// snapshot mode is fine; one mirrored by journal is ErrInvalid. A pool
	// not in image mirror mode is ErrNotMirrored.
	EnableMirroring(ctx context.Context, p Pool, image string) error
	// DisableMirroring turns mirroring off on the primary copy (rbd-mirror
	// then removes the peers' copies). An image not mirrored is fine; a
	// non-primary copy is ErrInvalid: turning its mirroring off would make
	// it a second, diverging image.
	DisableMirroring(ctx context.Context, p Pool, image string) error
	// PromoteImage makes this copy the primary. Without force the peer's
	// copy must have been demoted and its demotion have arrived here
	// (ErrBusy until then, or while a sync into this copy runs), or this
	// copy be DemotedHere; force
	// promotes whatever the peer is, with the data of the last mirror
	// snapshot that arrived whole. A primary copy is left as it is;
	// an image not mirrored is ErrNotMirrored.
	PromoteImage(ctx context.Context, p Pool, image string, force bool) error
	// DemoteImage makes the primary copy non-primary, with a last mirror
	// snapshot holding everything written until then, which rbd-mirror
	// copies to the peers. A non-primary copy is left as it is.
	DemoteImage(ctx context.Context, p Pool, image string) error
	// ResyncImage flags a non-primary copy for rbd-mirror to replace with
	// the primary's data (under a new RBD image ID); a primary one is
	// ErrInvalid. Whether a resync is called for is the caller's to judge.
	ResyncImage(ctx context.Context, p Pool, image string) error
	// MirrorSnapshot takes a mirror snapshot of the primary copy now and
	// returns its RBD snapshot ID; a non-primary is ErrInvalid, a pool
	// without a peer ErrNotMirrored.
	MirrorSnapshot(ctx context.Context, p Pool, image string) (uint64, error)
	// MirrorInfo reads whether and how the image is mirrored.
	MirrorInfo(ctx context.Context, p Pool, image string) (MirrorInfo, error)
	// MirrorStatus reads what the rbd-mirror daemons last reported about
	// the image: this site's and each peer's.
	MirrorStatus(ctx context.Context, p Pool, image string) (MirrorStatus, error)

	// MirrorSchedules lists the image's own mirror snapshot schedules
	// (the mgr's rbd_support module; not the pool's or the cluster's).
	MirrorSchedules(ctx context.Context, p Pool, image string) ([]MirrorSchedule, error)
	// AddMirrorSchedule adds one; an equal one already there is fine. A
	// malformed interval or start time is ErrInvalid.
	AddMirrorSchedule(ctx context.Context, p Pool, image string, s MirrorSchedule) error
	// RemoveMirrorSchedule removes one; a missing one is fine.
	RemoveMirrorSchedule(ctx context.Context, p Pool, image string, s MirrorSchedule) error
}

// MirrorState is an image's mirroring state.
type MirrorState string

// The states RBD knows.
const (
	MirrorDisabled  MirrorState = "disabled"
	MirrorEnabled   MirrorState = "enabled"
	MirrorDisabling MirrorState = "disabling"
)

// Mirror modes of an image.
const (
	MirrorModeSnapshot = "snapshot"
	MirrorModeJournal  = "journal"
)

// MirrorInfo is whether and how an image is mirrored.
type MirrorInfo struct {
	State MirrorState
	// Mode is MirrorModeSnapshot or MirrorModeJournal while enabled.
	Mode string
	// Primary: this copy is the one written to.
	Primary bool
	// PrimarySince, for a primary copy, is when it became primary: the
	// time of its first mirror snapshot since the newest one copied from
	// a peer (of the oldest one left, when librbd has pruned that). A
	// peer's report that its own copy is primary, written before, is
	// stale.
	PrimarySince time.Time
	// DemotedHere: a copy that is not primary whose newest mirror
	// snapshot was taken on this site: this site demoted it, and nothing
	// has arrived from a peer since. librbd promotes such a copy without
	// force (it takes it for an undone demotion), even when a peer was
	// promoted and written meanwhile, whose writes the copy lacks.
	DemotedHere bool
	// ResyncRequested: ResyncImage flagged the copy, and rbd-mirror has
	// not replaced it yet.
	ResyncRequested bool
	// GlobalID names the image on every site.
	GlobalID string
}

// Enabled reports whether mirroring is on.
func (m MirrorInfo) Enabled() bool { return m.State == MirrorEnabled }

// MirrorStatus is what the rbd-mirror daemons last reported about one
// image: Local is this site's (the zero value if none reported yet),
// Peers the other sites', each as seen from its own side.
type MirrorStatus struct {
	Local MirrorSiteStatus
	Peers []MirrorSiteStatus
}

// Site status states, as rbd-mirror reports them.
const (
	SiteUnknown        = "unknown"
	SiteError          = "error"
	SiteSyncing        = "syncing"
	SiteStartingReplay = "starting_replay"
	SiteReplaying      = "replaying"
	SiteStoppingReplay = "stopping_replay"
	SiteStopped        = "stopped"
)

// MirrorSiteStatus is one site's report.
type MirrorSiteStatus struct {
	// MirrorUUID names the peer site ("" for the local one).
	MirrorUUID string
	// State is one of the Site* states; Up says the reporting daemon is
	// alive (a report of a daemon that stopped stays, marked down).
	State       string
	Up          bool
	Description string
	LastUpdate  time.Time
}

// Description texts of rbd-mirror that the driver acts on.
const (
	// DescSplitBrain: the non-primary copy and the primary's history
	// diverged (both were primary and written).
	DescSplitBrain = "split-brain"
	// DescLocalPrimary: the reporting site's copy is primary.
	DescLocalPrimary = "local image is primary"
)

// SplitBrain reports whether the site's daemon, alive, says its copy
// diverged from the primary's: the one state a resync is for.
func (s MirrorSiteStatus) SplitBrain() bool {
	return s.Up && s.State == SiteError && strings.Contains(s.Description, DescSplitBrain)
}

// ClaimsPrimary reports whether the site's daemon, alive, says its own
// copy is primary.
func (s MirrorSiteStatus) ClaimsPrimary() bool {
	return s.Up && strings.Contains(s.Description, DescLocalPrimary)
}

// SecondPrimary reports whether the peer's daemon, alive, says its copy
// is primary in a report written after this site's primary copy (m)
// became primary: a split-brain. An older report is stale: daemons report
// every so often, and right after a relocation the old primary's last
// report still says it is primary.
func (s MirrorSiteStatus) SecondPrimary(m MirrorInfo) bool {
	return s.ClaimsPrimary() && (m.PrimarySince.IsZero() || s.LastUpdate.After(m.PrimarySince))
}

// MirrorSync is the last mirror snapshot a non-primary copy holds whole.
type MirrorSync struct {
	// SnapshotTime is when the primary took that snapshot: the copy
	// holds every write acknowledged before it.
	SnapshotTime time.Time
	// Duration is how long its copy took (whole seconds, as rbd-mirror
	// counts), Bytes how much it copied.
	Duration time.Duration
	Bytes    int64
}

// LastSync reads the last completed sync out of a replaying site's
// description (rbd-mirror's "replaying, {json}"); ok is false when it
// names none (no snapshot copied whole yet, or another state).
func (s MirrorSiteStatus) LastSync() (MirrorSync, bool) {
	i := strings.Index(s.Description, "{")
	if i < 0 {
		return MirrorSync{}, false
	}
	var d struct {
		LocalSnapshotTimestamp  *int64 `json:"local_snapshot_timestamp"`
		LastSnapshotSyncSeconds int64  `json:"last_snapshot_sync_seconds"`
		LastSnapshotBytes       int64  `json:"last_snapshot_bytes"`
	}
	if err := json.Unmarshal([]byte(s.Description[i:]), &d); err != nil || d.LocalSnapshotTimestamp == nil || *d.LocalSnapshotTimestamp <= 0 {
		return MirrorSync{}, false
	}
	return MirrorSync{
		SnapshotTime: time.Unix(*d.LocalSnapshotTimestamp, 0),
		Duration:     time.Duration(d.LastSnapshotSyncSeconds) * time.Second,
		Bytes:        max(0, d.LastSnapshotBytes),
	}, true
}

// MirrorSchedule is a mirror snapshot schedule of the mgr's rbd_support
// module: a snapshot every Interval ("30m", "1h", "1d"), counted from
// StartTime (a time of day, "14:00" or "02:30:00+01:00"; "" midnight UTC).
type MirrorSchedule struct {
	Interval  string
	StartTime string
}

func (s MirrorSchedule) String() string {
	if s.StartTime == "" {
		return "every " + s.Interval
	}
	return "every " + s.Interval + " from " + s.StartTime
}

// Normal is the schedule as rbd_support lists it: seconds always, a UTC
// offset as +HH:MM. Two schedules are the same when their Normal are.
func (s MirrorSchedule) Normal() MirrorSchedule {
	t := s.StartTime
	if t == "" {
		return s
	}
	offset := ""
	if i := strings.IndexAny(t, "Z+-"); i >= 0 {
		t, offset = t[:i], t[i:]
	}
	if strings.Count(t, ":") == 1 {
		t += ":00"
	}
	if offset == "Z" {
		offset = "+00:00"
	}
	s.StartTime = t + offset
	return s
}

var (
	scheduleInterval  = regexp.MustCompile(`^[1-9][0-9]{0,5}[mhd]$`)
	scheduleStartTime = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?$`)
)

// Validate accepts what rbd_support takes and refuses the rest with
// ErrInvalid, before anything reaches the mgr.
func (s MirrorSchedule) Validate() error {
	if !scheduleInterval.MatchString(s.Interval) {
		return fmt.Errorf("%w: schedule interval %.40q: want a whole number of minutes, hours or days, like 5m, 1h or 1d", ErrInvalid, s.Interval)
	}
	if s.StartTime != "" && !scheduleStartTime.MatchString(s.StartTime) {
		return fmt.Errorf("%w: schedule start time %.40q: want a time of day, HH:MM[:SS] with an optional UTC offset (14:00, 02:30:00+01:00)", ErrInvalid, s.StartTime)
	}
	return nil
}
