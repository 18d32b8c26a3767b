package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

// ledger remembers everything the bench made that still exists, so that
// it can all be removed whatever way the run ends.
type ledger struct {
	mu      sync.Mutex
	volumes map[string]csi.ControllerClient // volume ID -> the plugin that made it
	snaps   map[string]csi.ControllerClient
	raw     map[string]bool // raw baseline image names
	staged  map[string]stagedVol
	// published block targets (P10), by target path: unpublished first.
	published map[string]publishedVol
}

type stagedVol struct {
	volumeID, staging string
	node              csi.NodeClient
}

type publishedVol struct {
	volumeID, target string
	node             csi.NodeClient
}

func newLedger() *ledger {
	return &ledger{volumes: map[string]csi.ControllerClient{}, snaps: map[string]csi.ControllerClient{},
		raw: map[string]bool{}, staged: map[string]stagedVol{}, published: map[string]publishedVol{}}
}

func (l *ledger) addVolume(id string, c csi.ControllerClient) { l.set(func() { l.volumes[id] = c }) }
func (l *ledger) dropVolume(id string)                        { l.set(func() { delete(l.volumes, id) }) }
func (l *ledger) addSnap(id string, c csi.ControllerClient)   { l.set(func() { l.snaps[id] = c }) }
func (l *ledger) dropSnap(id string)                          { l.set(func() { delete(l.snaps, id) }) }
func (l *ledger) addRaw(name string)                          { l.set(func() { l.raw[name] = true }) }
func (l *ledger) dropRaw(name string)                         { l.set(func() { delete(l.raw, name) }) }
func (l *ledger) addStaged(s stagedVol)                       { l.set(func() { l.staged[s.staging] = s }) }
func (l *ledger) dropStaged(staging string)                   { l.set(func() { delete(l.staged, staging) }) }
func (l *ledger) addPublished(id, target string, n csi.NodeClient) {
	l.set(func() { l.published[target] = publishedVol{volumeID: id, target: target, node: n} })
}
func (l *ledger) dropPublished(target string) { l.set(func() { delete(l.published, target) }) }

func (l *ledger) set(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// cleanup unpublishes and unstages, then deletes volumes, snapshots and raw images; it
// returns what it could not remove.
func (l *ledger) cleanup(ctx context.Context, c cluster, raw *ceph.Backend, pool rbd.Pool) []string {
	l.mu.Lock()
	staged := make([]stagedVol, 0, len(l.staged))
	for _, s := range l.staged {
		staged = append(staged, s)
	}
	published := slices.Collect(maps.Values(l.published))
	vols, snaps, raws := maps.Clone(l.volumes), maps.Clone(l.snaps), keys(l.raw)
	l.mu.Unlock()
	if len(published)+len(staged)+len(vols)+len(snaps)+len(raws) > 0 {
		fmt.Fprintf(os.Stderr, "cleaning up: %d published, %d staged, %d volumes, %d snapshots, %d raw images\n", len(published), len(staged), len(vols), len(snaps), len(raws))
	}
	var failed []string
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		return f(cctx)
	}
	// A published target's staging is in staged too, unstaged below.
	for _, p := range published {
		err := call(func(ctx context.Context) error {
			_, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.volumeID, TargetPath: p.target})
			return err
		})
		if err != nil {
			failed = append(failed, fmt.Sprintf("unpublish %s at %s: %v", p.volumeID, p.target, err))
			continue
		}
		l.dropPublished(p.target)
	}
	for _, s := range staged {
		err := call(func(ctx context.Context) error {
			_, err := s.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.volumeID, StagingTargetPath: s.staging})
			return err
		})
		if err != nil {
			failed = append(failed, fmt.Sprintf("unstage %s at %s: %v", s.volumeID, s.staging, err))
			continue
		}
		_ = os.Remove(s.staging)
		l.dropStaged(s.staging)
	}
	for _, id := range keys(vols) {
		err := call(func(ctx context.Context) error {
			_, err := vols[id].DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: c.secrets()})
			return err
		})
		if err != nil {
			failed = append(failed, fmt.Sprintf("delete volume %s: %v", id, err))
			continue
		}
		l.dropVolume(id)
	}
	for _, id := range keys(snaps) {
		err := call(func(ctx context.Context) error {
			_, err := snaps[id].DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: c.secrets()})
			return err
		})
		if err != nil {
			failed = append(failed, fmt.Sprintf("delete snapshot %s: %v", id, err))
			continue
		}
		l.dropSnap(id)
	}
	for _, name := range raws {
		err := call(func(ctx context.Context) error { return raw.RemoveImage(ctx, pool, name) })
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			failed = append(failed, fmt.Sprintf("remove raw image %s: %v", name, err))
			continue
		}
		l.dropRaw(name)
	}
	return failed
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// runOps runs op(i) for every i in [0, n) on c workers and returns the
// wall time from the first start to the last return. The first error stops
// the workers from taking new work and is returned.
func runOps(ctx context.Context, n, c int, op func(ctx context.Context, i int) error) (time.Duration, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < min(c, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := op(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), firstErr
}
