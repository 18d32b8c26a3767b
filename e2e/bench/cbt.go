package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// P11, changed-block tracking: what a backup of a volume reads through the
// SnapshotMetadata service, and what listing costs on a big thin volume.
const (
	p11Volume  = 100 * gib // the volume a backup copies
	p11Base    = 1 * gib   // data in it at the first snapshot
	p11Changed = 64 * mib  // rewritten before the second, in p11Write pieces
	p11Write   = 256 << 10
	p11Rounds  = 3
)

type p11Result struct {
	// Bytes the listings name: the delta between the snapshots, and all
	// the second snapshot holds (a full backup's read).
	DeltaBytes     int64   `json:"delta_bytes"`
	AllocatedBytes int64   `json:"allocated_bytes"`
	DeltaS         float64 `json:"delta_s"`     // median listing time
	AllocatedS     float64 `json:"allocated_s"` // median listing time
	// GetMetadataAllocated of a 1 TiB and of a 1 GiB thin volume holding
	// the same p11Changed bytes at their start.
	ThinTiBS   float64 `json:"thin_tib_s"`
	ThinGiBS   float64 `json:"thin_gib_s"`
	ThinTiBRef int64   `json:"thin_tib_bytes"`
}

func (b *bench) runP11(ctx context.Context, p *plugin) error {
	b.logf("P11: changed blocks of a %d GiB volume holding %d MiB, %d MiB rewritten; listing a thin 1 TiB volume", p11Volume/gib, p11Base/mib, p11Changed/mib)
	res, err := b.p11(ctx, p)
	b.rep.Details["p11"] = res
	if err != nil {
		return err
	}
	b.rep.add(keyP11Bytes, vs(fmt.Sprintf("bytes a backup reads: GetMetadataDelta (%d MiB rewritten in %d KiB pieces) vs GetMetadataAllocated", p11Changed/mib, p11Write>>10),
		"MiB", float64(res.DeltaBytes)/float64(mib), float64(res.AllocatedBytes)/float64(mib), "allocated"))
	b.rep.add(keyP11Time, vs(fmt.Sprintf("listing time: GetMetadataDelta vs GetMetadataAllocated (median of %d)", p11Rounds), "s", res.DeltaS, res.AllocatedS, "allocated"))
	b.rep.add(keyP11Thin, vs(fmt.Sprintf("GetMetadataAllocated of a 1 TiB thin volume vs 1 GiB, %d MiB in each (median of %d)", p11Changed/mib, p11Rounds), "s", res.ThinTiBS, res.ThinGiBS, "1 GiB"))
	return nil
}

func (b *bench) p11(ctx context.Context, p *plugin) (p11Result, error) {
	var res p11Result
	cc, smc := p.controller(), csi.NewSnapshotMetadataClient(p.conn)
	vol, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p11", b.runID), p11Volume, "ext4", nil)
	if err != nil {
		return res, err
	}
	image := imageOf(vol.VolumeId)
	if err := b.fill(ctx, image, p11Base); err != nil {
		return res, err
	}
	s1, err := b.createSnapshot(ctx, cc, fmt.Sprintf("bench-%s-p11-s1", b.runID), vol.VolumeId)
	if err != nil {
		return res, err
	}
	// Rewrites of data the base holds, scattered as a database's are.
	rnd := rand.New(rand.NewPCG(11, 11))
	buf := make([]byte, p11Write)
	for range p11Changed / p11Write {
		off := uint64(rnd.Int64N(p11Base/p11Write)) * p11Write
		if err := b.raw.WriteAt(ctx, b.pool, image, off, buf); err != nil {
			return res, err
		}
	}
	s2, err := b.createSnapshot(ctx, cc, fmt.Sprintf("bench-%s-p11-s2", b.runID), vol.VolumeId)
	if err != nil {
		return res, err
	}
	var deltas, allocs []float64
	for range p11Rounds {
		t, n, err := b.timeList(ctx, func(ctx context.Context) (recvFunc, error) {
			s, err := smc.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{BaseSnapshotId: s1.SnapshotId, TargetSnapshotId: s2.SnapshotId, Secrets: b.c.secrets()})
			return func() ([]*csi.BlockMetadata, error) { r, err := s.Recv(); return r.GetBlockMetadata(), err }, err
		})
		if err != nil {
			return res, err
		}
		deltas, res.DeltaBytes = append(deltas, t), n
		if t, n, err = b.allocated(ctx, smc, s2.SnapshotId); err != nil {
			return res, err
		}
		allocs, res.AllocatedBytes = append(allocs, t), n
	}
	res.DeltaS, res.AllocatedS = median(deltas), median(allocs)
	b.logf("  P11 delta %d MiB in %.2f s, allocated %d MiB in %.2f s", res.DeltaBytes/mib, res.DeltaS, res.AllocatedBytes/mib, res.AllocatedS)
	for _, s := range []*csi.Snapshot{s1, s2} {
		if err := b.deleteSnapshot(ctx, cc, s.SnapshotId); err != nil {
			return res, err
		}
	}
	if err := b.deleteVolume(ctx, cc, vol.VolumeId); err != nil {
		return res, err
	}

	// A thin volume's listing should cost what its data does, not its size.
	for _, size := range []int64{tib, gib} {
		v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p11-thin-%d", b.runID, size>>30), size, "ext4", nil)
		if err != nil {
			return res, err
		}
		if err := b.fill(ctx, imageOf(v.VolumeId), p11Changed); err != nil {
			return res, err
		}
		s, err := b.createSnapshot(ctx, cc, fmt.Sprintf("bench-%s-p11-thin-%d", b.runID, size>>30), v.VolumeId)
		if err != nil {
			return res, err
		}
		var ts []float64
		for range p11Rounds {
			t, n, err := b.allocated(ctx, smc, s.SnapshotId)
			if err != nil {
				return res, err
			}
			ts = append(ts, t)
			if size == tib {
				res.ThinTiBRef = n
			}
		}
		if size == tib {
			res.ThinTiBS = median(ts)
		} else {
			res.ThinGiBS = median(ts)
		}
		b.logf("  P11 allocated of a thin %d GiB volume: %.2f s", size>>30, median(ts))
		if err := b.deleteSnapshot(ctx, cc, s.SnapshotId); err != nil {
			return res, err
		}
		if err := b.deleteVolumeWithin(ctx, cc, v.VolumeId, b.cfg.nodeTimeout); err != nil {
			return res, err
		}
	}
	return res, nil
}

// fill writes n bytes at the image's start, 4 MiB at a time (rbd bench's
// sequential pattern spreads its threads over the whole image).
func (b *bench) fill(ctx context.Context, image string, n int64) error {
	buf := make([]byte, 4*mib)
	for off := int64(0); off < n; off += 4 * mib {
		if err := b.raw.WriteAt(ctx, b.pool, image, uint64(off), buf[:min(4*mib, n-off)]); err != nil {
			return err
		}
	}
	return nil
}

type recvFunc func() ([]*csi.BlockMetadata, error)

func (b *bench) allocated(ctx context.Context, smc csi.SnapshotMetadataClient, snap string) (float64, int64, error) {
	return b.timeList(ctx, func(ctx context.Context) (recvFunc, error) {
		s, err := smc.GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{SnapshotId: snap, Secrets: b.c.secrets()})
		return func() ([]*csi.BlockMetadata, error) { r, err := s.Recv(); return r.GetBlockMetadata(), err }, err
	})
}

// timeList reads a whole SnapshotMetadata stream: its time and the bytes
// its ranges cover.
func (b *bench) timeList(ctx context.Context, open func(context.Context) (recvFunc, error)) (float64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
	defer cancel()
	start := time.Now()
	recv, err := open(ctx)
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for {
		blocks, err := recv()
		if errors.Is(err, io.EOF) {
			return time.Since(start).Seconds(), n, nil
		}
		if err != nil {
			return 0, 0, err
		}
		for _, bl := range blocks {
			n += bl.SizeBytes
		}
	}
}
