package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/command"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// Freed blocks go back to Ceph only as discards. Filesystems are mounted
// without online discard (docs/operations.md#freed-space-fstrim-and-sparsify),
// so the node trims them in batches: TrimAll on an interval or on demand.

// Trim results, as TrimObserver and the metrics name them.
const (
	TrimOK          = "ok"
	TrimUnsupported = "unsupported" // the mapper passes no discards (fuse)
	TrimBusy        = "busy"        // an operation on the volume was running
	TrimError       = "error"
)

// TrimObserver is told the outcome of each volume's trim.
type TrimObserver interface {
	Trimmed(result string, bytes uint64)
}

// TrimResult is one volume's trim.
type TrimResult struct {
	VolumeID string
	Result   string
	Bytes    uint64
	Err      error
}

var trimmedBytes = regexp.MustCompile(`\((\d+) bytes\) trimmed`)

// TrimAll runs fstrim on every staged, writable filesystem volume of one
// writer (the volume's own filesystem: several nodes never mount one), one
// at a time, each under the volume's lock; a volume busy with a request is
// skipped until the next run.
func (n *Node) TrimAll(ctx context.Context, obs TrimObserver) []TrimResult {
	files, _ := filepath.Glob(filepath.Join(n.store.dir, "*.json"))
	var out []TrimResult
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		id := n.store.volumeIDOf(f)
		if id == "" {
			continue
		}
		r := n.trim(ctx, id)
		if r.Result == "" {
			continue // not a volume to trim
		}
		if obs != nil {
			obs.Trimmed(r.Result, r.Bytes)
		}
		if r.Err != nil {
			klog.ErrorS(r.Err, "trimming a volume", "volumeID", r.VolumeID, "result", r.Result)
		} else {
			klog.V(2).InfoS("trimmed a volume", "volumeID", r.VolumeID, "result", r.Result, "bytes", r.Bytes)
		}
		out = append(out, r)
	}
	return out
}

func (n *Node) trim(ctx context.Context, id string) TrimResult {
	release, ok := n.locks.TryLock("vol/" + id)
	if !ok {
		return TrimResult{VolumeID: id, Result: TrimBusy}
	}
	defer release()
	rec, err := n.store.load(id)
	if err != nil || rec == nil || !trimmable(rec) {
		return TrimResult{}
	}
	return n.trimStaged(ctx, id, rec)
}

// trimStaged runs fstrim on the staged filesystem of rec. The caller
// holds the volume's lock and has checked that it is trimmable.
func (n *Node) trimStaged(ctx context.Context, id string, rec *record) TrimResult {
	if rec.Mounter == mapper.Fuse {
		// rbd-fuse implements no fallocate: its loop device may take the
		// discards, but nothing reaches Ceph (seen in TestFstrimGivesSpaceBack).
		return TrimResult{VolumeID: id, Result: TrimUnsupported}
	}
	// runs: fstrim (util-linux)
	stdout, err := n.run.Run(ctx, "fstrim", "--verbose", "--", rec.StagingPath)
	var cmdErr *command.Error
	switch {
	case err == nil:
		var bytes uint64
		if m := trimmedBytes.FindSubmatch(stdout); m != nil {
			bytes, _ = strconv.ParseUint(string(m[1]), 10, 64)
		}
		return TrimResult{VolumeID: id, Result: TrimOK, Bytes: bytes}
	case errors.As(err, &cmdErr) && strings.Contains(cmdErr.Stderr, "not supported"):
		return TrimResult{VolumeID: id, Result: TrimUnsupported}
	default:
		return TrimResult{VolumeID: id, Result: TrimError, Err: err}
	}
}

// trimmable: a finished stage of a filesystem this node alone writes
// (ReadWriteOnce, ReadWriteOncePod).
func trimmable(r *record) bool {
	if !r.Staged || r.Cap.Block || r.StagingPath == "" {
		return false
	}
	switch r.Cap.AccessMode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER.String(),
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER.String(),
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER.String():
		return true
	}
	return false
}

// volumeIDOf reads the volume ID of a record file, "" if it is not one.
func (s *store) volumeIDOf(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	var head struct {
		VolumeID string `json:"volumeID"`
	}
	if json.Unmarshal(b, &head) != nil {
		return ""
	}
	return head.VolumeID
}
