package records

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// WorkIndex is an omap object listing work in progress that a crash could
// abandon where the sweep does not otherwise look (snapshot claims,
// temporary snapshots on static images): key the work, value
// "<unix time>[ <details>]". Each instance keeps its own (Names.Object).
type WorkIndex struct {
	backend rbd.Backend
	object  string
}

// NewWorkIndex is the index kept in object.
func NewWorkIndex(backend rbd.Backend, object string) WorkIndex {
	return WorkIndex{backend: backend, object: object}
}

// Entry is one listed piece of work; a value that does not start with a
// time has a zero At.
type Entry struct {
	Key, Details string
	At           time.Time
}

// Add records the work as started now.
func (x WorkIndex) Add(ctx context.Context, pool rbd.Pool, key, details string) error {
	v := strconv.FormatInt(time.Now().Unix(), 10)
	if details != "" {
		v += " " + details
	}
	return x.backend.SetOmap(ctx, pool, x.object, map[string]string{key: v})
}

// Drop removes the entries of work that is settled.
func (x WorkIndex) Drop(ctx context.Context, pool rbd.Pool, keys ...string) error {
	return x.backend.RemoveOmapKeys(ctx, pool, x.object, keys...)
}

// List returns the entries.
func (x WorkIndex) List(ctx context.Context, pool rbd.Pool) ([]Entry, error) {
	kv, err := x.backend.ListOmap(ctx, pool, x.object, "")
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(kv))
	for k, v := range kv {
		at, details, _ := strings.Cut(v, " ")
		e := Entry{Key: k, Details: details}
		if sec, err := strconv.ParseInt(at, 10, 64); err == nil {
			e.At = time.Unix(sec, 0)
		}
		out = append(out, e)
	}
	return out, nil
}
