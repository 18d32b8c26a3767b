package records

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A group snapshot's record: the claim of its name, holding the sorted
// source volume IDs, with the rest in its omap. It exists from the first
// step of a create; its members are written last, and from then on the
// group snapshot exists.

// groupRecordPrefix + the group's hash names a group snapshot's record.
const groupRecordPrefix = "rbdcsi.vgs."

// Omap keys of a group snapshot's record.
const (
	recName    = "name"    // the request name
	recStarted = "started" // unix seconds of the first attempt
	recTaken   = "taken"   // unix nanoseconds of the RBD group snapshot
	recMembers = "members" // JSON []GroupMember, written last
)

// ErrCorruptRecord: a group snapshot's record cannot be read.
var ErrCorruptRecord = errors.New("the group snapshot record is corrupt")

// GroupMember is one member snapshot as the record keeps it.
type GroupMember struct {
	Snapshot string `json:"snapshot"`
	Source   string `json:"source"`
	Size     int64  `json:"size"`
}

// GroupRecord is what a record holds; a zero one: no record.
type GroupRecord struct {
	Exists  bool
	Name    string
	Started time.Time
	Taken   time.Time
	Members []GroupMember // nil until the last step
}

// Complete: the members are recorded, the group snapshot exists.
func (r GroupRecord) Complete() bool { return r.Members != nil }

// Groups reads and writes the instance's group snapshot records; a
// record is named by its group's hash (Names.GroupHash).
type Groups struct {
	backend rbd.Backend
	names   Names
}

// NewGroups returns the instance's group records.
func NewGroups(backend rbd.Backend, n Names) Groups { return Groups{backend: backend, names: n} }

// Object names the record of the group snapshot of hash.
func (g Groups) Object(hash string) string { return g.names.Object(groupRecordPrefix + hash) }

// Exists tells whether the record of hash exists.
func (g Groups) Exists(ctx context.Context, pool rbd.Pool, hash string) (bool, error) {
	_, ok, err := g.backend.ClaimHolder(ctx, pool, g.Object(hash))
	return ok, err
}

// Read reads the record; none is a zero GroupRecord.
func (g Groups) Read(ctx context.Context, pool rbd.Pool, hash string) (GroupRecord, error) {
	ok, err := g.Exists(ctx, pool, hash)
	if errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && !ok) {
		return GroupRecord{}, nil
	}
	if err != nil {
		return GroupRecord{}, err
	}
	return g.ReadClaimed(ctx, pool, hash)
}

// ReadClaimed reads the omap of a record known to exist.
func (g Groups) ReadClaimed(ctx context.Context, pool rbd.Pool, hash string) (GroupRecord, error) {
	kv, err := g.backend.ListOmap(ctx, pool, g.Object(hash), "")
	if err != nil {
		return GroupRecord{}, err
	}
	r := GroupRecord{Exists: true, Name: kv[recName]}
	if s, err := strconv.ParseInt(kv[recStarted], 10, 64); err == nil {
		r.Started = time.Unix(s, 0)
	}
	if ns, err := strconv.ParseInt(kv[recTaken], 10, 64); err == nil {
		r.Taken = time.Unix(0, ns)
	}
	if m, ok := kv[recMembers]; ok {
		if err := json.Unmarshal([]byte(m), &r.Members); err != nil || r.Members == nil {
			return GroupRecord{}, fmt.Errorf("%w: %v", ErrCorruptRecord, err)
		}
	}
	return r, nil
}

// Claim makes the record of hash for the sources (the sorted source volume
// IDs, one a line) unless it exists, and returns the sources it holds.
func (g Groups) Claim(ctx context.Context, pool rbd.Pool, hash, sources string) (string, error) {
	return g.backend.Claim(ctx, pool, g.Object(hash), sources)
}

// SetStarted records the request name and the first attempt's time.
func (g Groups) SetStarted(ctx context.Context, pool rbd.Pool, hash, name string, at time.Time) error {
	return g.backend.SetOmap(ctx, pool, g.Object(hash), map[string]string{recName: name, recStarted: strconv.FormatInt(at.Unix(), 10)})
}

// SetTaken records when the RBD group snapshot was taken.
func (g Groups) SetTaken(ctx context.Context, pool rbd.Pool, hash string, at time.Time) error {
	return g.backend.SetOmap(ctx, pool, g.Object(hash), map[string]string{recTaken: strconv.FormatInt(at.UnixNano(), 10)})
}

// SetMembers records the members: the group snapshot exists from here on.
func (g Groups) SetMembers(ctx context.Context, pool rbd.Pool, hash string, members []GroupMember) error {
	value, err := json.Marshal(members)
	if err != nil {
		return fmt.Errorf("group snapshot record: %w", err)
	}
	return g.backend.SetOmap(ctx, pool, g.Object(hash), map[string]string{recMembers: string(value)})
}

// Remove removes the record.
func (g Groups) Remove(ctx context.Context, pool rbd.Pool, hash string) error {
	return g.backend.Unclaim(ctx, pool, g.Object(hash))
}
