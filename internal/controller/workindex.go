package controller

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// workIndex is an omap object listing work in progress that a crash could
// abandon where the sweeper does not otherwise look (snapshot claims,
// temporary snapshots on static images): key the work, value
// "<unix time>[ <details>]". Each instance keeps its own (naming.object).
type workIndex struct {
	backend rbd.Backend
	object  string
}

// indexEntry is one listed piece of work; a value that does not start
// with a time has a zero at.
type indexEntry struct {
	key, details string
	at           time.Time
}

// add records the work as started now.
func (x workIndex) add(ctx context.Context, pool rbd.Pool, key, details string) error {
	v := strconv.FormatInt(time.Now().Unix(), 10)
	if details != "" {
		v += " " + details
	}
	return x.backend.SetOmap(ctx, pool, x.object, map[string]string{key: v})
}

// drop removes the entries of work that is settled.
func (x workIndex) drop(ctx context.Context, pool rbd.Pool, keys ...string) error {
	return x.backend.RemoveOmapKeys(ctx, pool, x.object, keys...)
}

// list returns the entries.
func (x workIndex) list(ctx context.Context, pool rbd.Pool) ([]indexEntry, error) {
	kv, err := x.backend.ListOmap(ctx, pool, x.object, "")
	if err != nil {
		return nil, err
	}
	out := make([]indexEntry, 0, len(kv))
	for k, v := range kv {
		at, details, _ := strings.Cut(v, " ")
		e := indexEntry{key: k, details: details}
		if sec, err := strconv.ParseInt(at, 10, 64); err == nil {
			e.at = time.Unix(sec, 0)
		}
		out = append(out, e)
	}
	return out, nil
}
