package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// restoreRun is one timed restore (CreateVolume from a snapshot).
type restoreRun struct {
	Source   string  `json:"source"` // "empty" or "written"
	Round    int     `json:"round"`
	CreateS  float64 `json:"create_s"`
	DeleteS  float64 `json:"delete_s"`
	IsClone  bool    `json:"is_clone"` // the restored image has a parent (copy-on-write, not flattened)
	ParentOf string  `json:"parent,omitempty"`
}

type p4Result struct {
	DataBytes      int64        `json:"data_bytes"`
	WrittenBytes   int64        `json:"written_bytes"` // used_size of the written volume per rbd du
	WriteS         float64      `json:"write_s"`
	SnapshotS      [2]float64   `json:"snapshot_s"` // CreateSnapshot of the empty and the written volume
	Runs           []restoreRun `json:"runs"`
	EmptyMedianS   float64      `json:"empty_median_s"`
	FullMedianS    float64      `json:"written_median_s"`
	Ratio          float64      `json:"ratio"`
	DeleteRatio    float64      `json:"delete_ratio"`
	AllCopyOnWrite bool         `json:"all_copy_on_write"`
}

// imageOf is the RBD image of a volume ID (v1:<clusterID>:<pool>:<image>).
func imageOf(volumeID string) string {
	parts := strings.Split(volumeID, ":")
	return parts[len(parts)-1]
}

func (b *bench) createSnapshot(ctx context.Context, cc csi.ControllerClient, name, src string) (*csi.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
	defer cancel()
	resp, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src, Secrets: b.c.secrets()})
	if err != nil {
		return nil, fmt.Errorf("CreateSnapshot %s: %w", name, err)
	}
	b.led.addSnap(resp.Snapshot.SnapshotId, cc)
	return resp.Snapshot, nil
}

func (b *bench) deleteSnapshot(ctx context.Context, cc csi.ControllerClient, id string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
	defer cancel()
	if _, err := cc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: b.c.secrets()}); err != nil {
		return fmt.Errorf("DeleteSnapshot %s: %w", id, err)
	}
	b.led.dropSnap(id)
	return nil
}

// p4 times restores from a snapshot of an empty volume and of one with
// restoreData bytes written.
func (b *bench) p4(ctx context.Context, p *plugin) (p4Result, error) {
	cc := p.controller()
	data := b.cfg.restoreData
	res := p4Result{DataBytes: data}
	size := max(data, gib)
	empty, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p4-empty", b.runID), size, "ext4", nil)
	if err != nil {
		return res, err
	}
	full, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p4-written", b.runID), size, "ext4", nil)
	if err != nil {
		return res, err
	}
	spec := b.c.Pool + "/" + imageOf(full.VolumeId)
	start := time.Now()
	if _, err := b.c.admin(ctx, "rbd", "bench", "--io-type", "write", "--io-size", "4M", "--io-threads", "8",
		"--io-total", fmt.Sprint(data), "--io-pattern", "seq", spec); err != nil {
		return res, err
	}
	res.WriteS = time.Since(start).Seconds()
	if out, err := b.c.admin(ctx, "rbd", "du", "--format", "json", spec); err == nil {
		var du struct {
			Images []struct {
				UsedSize int64 `json:"used_size"`
			} `json:"images"`
		}
		if json.Unmarshal([]byte(out), &du) == nil && len(du.Images) > 0 {
			res.WrittenBytes = du.Images[0].UsedSize
		}
	}
	b.logf("  P4 wrote %d MiB in %.1fs (rbd du: %d MiB used)", data/mib, res.WriteS, res.WrittenBytes/mib)

	var snaps [2]*csi.Snapshot
	for k, v := range []*csi.Volume{empty, full} {
		start := time.Now()
		s, err := b.createSnapshot(ctx, cc, fmt.Sprintf("bench-%s-p4-snap%d", b.runID, k), v.VolumeId)
		if err != nil {
			return res, err
		}
		res.SnapshotS[k] = time.Since(start).Seconds()
		snaps[k] = s
	}
	names := [2]string{"empty", "written"}
	var times, deletes [2][]float64
	res.AllCopyOnWrite = true
	for round := 0; round < b.cfg.restoreRounds; round++ {
		for j := 0; j < 2; j++ {
			k := (j + round) % 2
			src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snaps[k].SnapshotId}}}
			start := time.Now()
			v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p4-restore-%s-%d", b.runID, names[k], round), size, "ext4", src)
			if err != nil {
				return res, err
			}
			took := time.Since(start)
			run := restoreRun{Source: names[k], Round: round, CreateS: took.Seconds()}
			if out, err := b.c.admin(ctx, "rbd", "info", "--format", "json", b.c.Pool+"/"+imageOf(v.VolumeId)); err == nil {
				var info struct {
					Parent *struct {
						Image    string `json:"image"`
						Snapshot string `json:"snapshot"`
					} `json:"parent"`
				}
				if json.Unmarshal([]byte(out), &info) == nil && info.Parent != nil {
					run.IsClone, run.ParentOf = true, info.Parent.Image+"@"+info.Parent.Snapshot
				}
			}
			res.AllCopyOnWrite = res.AllCopyOnWrite && run.IsClone
			start = time.Now()
			if err := b.deleteVolume(ctx, cc, v.VolumeId); err != nil {
				return res, err
			}
			run.DeleteS = time.Since(start).Seconds()
			times[k] = append(times[k], run.CreateS)
			deletes[k] = append(deletes[k], run.DeleteS)
			res.Runs = append(res.Runs, run)
			b.logf("  P4 round %d restore from %-7s %6.0f ms (clone: %v), delete %6.0f ms", round+1, names[k], run.CreateS*1000, run.IsClone, run.DeleteS*1000)
		}
	}
	res.EmptyMedianS, res.FullMedianS = median(times[0]), median(times[1])
	res.Ratio = res.FullMedianS / res.EmptyMedianS
	res.DeleteRatio = median(deletes[1]) / median(deletes[0])
	for _, s := range snaps {
		if err := b.deleteSnapshot(ctx, cc, s.SnapshotId); err != nil {
			return res, err
		}
	}
	for _, v := range []*csi.Volume{empty, full} {
		if err := b.deleteVolume(ctx, cc, v.VolumeId); err != nil {
			return res, err
		}
	}
	return res, nil
}
