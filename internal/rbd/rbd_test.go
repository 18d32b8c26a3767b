package rbd

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// The marker is written after every other key, whatever it sorts as, so
// its presence proves the rest were written.
func TestMetadataOrderWritesTheMarkerLast(t *testing.T) {
	for _, c := range []struct {
		spec ImageSpec
		want []string
	}{
		{ImageSpec{Metadata: map[string]string{"b": "", "a": "", "z": ""}, Marker: "a"}, []string{"b", "z", "a"}},
		{ImageSpec{Metadata: map[string]string{"b": "", "a": ""}}, []string{"a", "b"}},
		{ImageSpec{Metadata: map[string]string{"b": ""}, Marker: "a"}, []string{"b"}},
		{ImageSpec{}, []string{}},
	} {
		if got := c.spec.MetadataOrder(); !slices.Equal(got, c.want) {
			t.Errorf("%v marker %q: order %v, want %v", c.spec.Metadata, c.spec.Marker, got, c.want)
		}
	}
}

// A whole host, a range or anything with spaces is never a client
// address: blocklisting it would bar more than one client.
func TestValidClientAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:0/85892054", "[::1]:0/1", "10.1.2.3:6789/0"} {
		if err := ValidClientAddr(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:0", "10.0.0.0/24", "10.0.0.0:0/x", "a b/1", "127.0.0.1:0/1\n"} {
		if err := ValidClientAddr(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// Schedules are compared as rbd_support lists them, and only what it
// takes (a subset: times of day) passes Validate.
func TestMirrorSchedule(t *testing.T) {
	for in, want := range map[string]string{"": "", "14:00": "14:00:00", "02:30+01:00": "02:30:00+01:00", "02:30:15Z": "02:30:15+00:00", "23:59:59-05:00": "23:59:59-05:00"} {
		s := MirrorSchedule{Interval: "1h", StartTime: in}
		if err := s.Validate(); err != nil {
			t.Errorf("%q refused: %v", in, err)
		}
		if got := s.Normal().StartTime; got != want {
			t.Errorf("Normal(%q) = %q, want %q", in, got, want)
		}
	}
	for _, bad := range []MirrorSchedule{{}, {Interval: "1w"}, {Interval: "0h"}, {Interval: "1h30m"}, {Interval: "-1m"}, {Interval: "5m", StartTime: "24:00"},
		{Interval: "5m", StartTime: "2020-01-01T02:30"}, {Interval: "5m", StartTime: "1:00"}, {Interval: "5m", StartTime: "10:00 --pool x"}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

// The last completed sync is read from rbd-mirror's descriptions as
// Pacific writes them; one that names none gives none.
func TestMirrorSiteStatusLastSync(t *testing.T) {
	replaying := MirrorSiteStatus{State: SiteReplaying, Up: true, Description: `replaying, {"bytes_per_second":419430.4,"bytes_per_snapshot":2097152.0,"last_snapshot_bytes":4194304,"last_snapshot_sync_seconds":3,"local_snapshot_timestamp":1796284779,"remote_snapshot_timestamp":1796284779,"replay_state":"idle"}`}
	got, ok := replaying.LastSync()
	if !ok || !got.SnapshotTime.Equal(time.Unix(1796284779, 0)) || got.Duration != 3*time.Second || got.Bytes != 4194304 {
		t.Errorf("LastSync = %+v, %v", got, ok)
	}
	for _, desc := range []string{
		`replaying, {"bytes_per_second":0.0,"bytes_per_snapshot":0.0,"last_snapshot_bytes":0,"last_snapshot_sync_seconds":0,"remote_snapshot_timestamp":1796284774,"replay_state":"idle"}`,
		"local image is primary", "split-brain", "status not found", "replaying, {broken",
	} {
		if got, ok := (MirrorSiteStatus{Description: desc}).LastSync(); ok {
			t.Errorf("%q: LastSync = %+v", desc, got)
		}
	}
	split := MirrorSiteStatus{State: SiteError, Up: true, Description: "split-brain"}
	if !split.SplitBrain() || (MirrorSiteStatus{State: SiteError, Description: "split-brain"}).SplitBrain() || replaying.SplitBrain() {
		t.Error("SplitBrain must hold for a live daemon's split-brain error only")
	}
	primary := MirrorSiteStatus{State: SiteStopped, Up: true, Description: "local image is primary"}
	if !primary.ClaimsPrimary() || replaying.ClaimsPrimary() {
		t.Error("ClaimsPrimary must hold for a live daemon whose copy is primary only")
	}
}
