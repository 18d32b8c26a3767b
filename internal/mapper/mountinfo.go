package mapper

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	mount "k8s.io/mount-utils"
)

// isFuseMount reports whether dir is the mount point of an rbd-fuse file
// system, from /proc/self/mountinfo (a stat of a dead FUSE mount would
// fail or hang; the mount table never does).
func isFuseMount(sysRoot, dir string) bool {
	infos, err := mount.ParseMountInfo(filepath.Join(sysRoot, "proc/self/mountinfo"))
	if err != nil {
		return false
	}
	for _, m := range infos {
		// The mount table escapes space, tab, newline and backslash in
		// paths; ParseMountInfo leaves them so.
		if unescapeMount(m.MountPoint) == dir && (m.FsType == "fuse.rbd-fuse" || m.FsType == "fuse") {
			return true
		}
	}
	return false
}

// unescapeMount undoes the octal escapes mountinfo uses for space, tab,
// newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// statWithin stats path, giving up after limit (or ctx): a FUSE file whose
// daemon hangs would otherwise block the call.
func statWithin(ctx context.Context, path string, limit time.Duration) (fs.FileInfo, error) {
	type result struct {
		st  fs.FileInfo
		err error
	}
	ch := make(chan result, 1)
	go func() {
		st, err := os.Stat(path)
		ch <- result{st, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case r := <-ch:
		return r.st, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("stat %s: no answer: %w", path, ctx.Err())
	}
}

// listing is what readDirAsync found.
type listing struct {
	names []string
	err   error
}

// readDirAsync lists dir's names in the background: a hung FUSE server
// blocks the listing, not the caller (awaitListing).
func readDirAsync(dir string) <-chan listing {
	ch := make(chan listing, 1)
	go func() {
		entries, err := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		ch <- listing{names, err}
	}()
	return ch
}

// awaitListing waits for readDirAsync's answer, giving up when ctx ends.
func awaitListing(ctx context.Context, dir string, ch <-chan listing) ([]string, error) {
	select {
	case r := <-ch:
		return r.names, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("listing %s: no answer: %w", dir, ctx.Err())
	}
}
