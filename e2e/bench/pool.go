package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// waitPoolClean polls until the pool holds no image, trash entry, pending
// rbd task or RBD image object, and returns when it first saw that: the
// deletes' return if the first look finds it clean.
func (b *bench) waitPoolClean(ctx context.Context, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	first := true
	for {
		at := time.Now()
		left, err := b.poolContents(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if len(left) == 0 {
			if first {
				return at, nil
			}
			return time.Now(), nil
		}
		first = false
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("storage not reclaimed %s after the deletes: %s", limit, strings.Join(left, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// poolContents lists what is left in the pool: images, trash entries,
// rbd_support tasks (the mgr's background removals) and RBD objects.
func (b *bench) poolContents(ctx context.Context) ([]string, error) {
	type res struct {
		what, out string
		err       error
	}
	cmds := []struct {
		what, tool string
		args       []string
	}{
		{"images", "rbd", []string{"ls", "-p", b.c.Pool, "--format", "json"}},
		{"trash", "rbd", []string{"trash", "ls", "-p", b.c.Pool, "--format", "json"}},
		{"rbd tasks", "ceph", []string{"rbd", "task", "list", "--format", "json"}},
		{"objects", "rados", []string{"-p", b.c.Pool, "ls"}},
	}
	out := make([]res, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// runs: rbd ceph rados
			o, err := b.c.admin(ctx, cmd.tool, cmd.args...)
			out[i] = res{cmd.what, o, err}
		}()
	}
	wg.Wait()
	var left []string
	for _, r := range out {
		if r.err != nil {
			return nil, r.err
		}
		switch r.what {
		case "objects":
			var objs []string
			for _, o := range strings.Fields(r.out) {
				if strings.HasPrefix(o, "rbd_data.") || strings.HasPrefix(o, "rbd_header.") || strings.HasPrefix(o, "rbd_id.") {
					objs = append(objs, o)
				}
			}
			if len(objs) > 0 {
				left = append(left, fmt.Sprintf("%d RBD objects (%s...)", len(objs), objs[0]))
			}
		default:
			var list []json.RawMessage
			if err := json.Unmarshal([]byte(strings.TrimSpace(orEmpty(r.out))), &list); err != nil {
				return nil, fmt.Errorf("parsing %s: %w: %q", r.what, err, r.out)
			}
			if len(list) > 0 {
				left = append(left, fmt.Sprintf("%d %s (%s...)", len(list), r.what, list[0]))
			}
		}
	}
	return left, nil
}

func orEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "[]"
	}
	return s
}
