package main

import (
	"fmt"
	"io"
)

// judge is how a row's figure is held to its target.
type judge int

const (
	reported   judge = iota // no target: the row explains another
	atLeast                 // ratio >= limit
	atMost                  // ratio <= limit
	budget                  // value <= limit, in the row's unit
	noneBeyond              // no object beyond the reference set
	zero                    // value == 0, in the row's unit
)

// target is one kind of row: what it measures, what it compares that
// with, and the threshold that judges it. The table is fixed here, before
// any run: a row takes its threshold from it and from nowhere else.
type target struct {
	Key     string  `json:"key"`
	ID      string  `json:"id"`
	Measure string  `json:"measure"`
	Versus  string  `json:"versus"`
	Judge   judge   `json:"-"`
	Limit   float64 `json:"limit,omitempty"`
	Unit    string  `json:"-"`
	// Invert makes the ratio reference/value (a speed-up) instead of
	// value/reference.
	Invert bool   `json:"-"`
	Target string `json:"target"` // Judge and Limit in words, for the table
}

// The raw librbd sides run in the bench's own process and do the least
// Ceph work a call needs: the physical limit every ratio target is set
// against. Rows against the gRPC floor explain what part of a gap serving
// over gRPC costs; they carry no target.
const (
	keyP1Create        = "P1 create"
	keyP1CreateGFloor  = "P1 create vs gRPC floor"
	keyP1GFloorRaw     = "P1 gRPC floor vs raw"
	keyP2Reclaim       = "P2 reclaim"
	keyP2ReclaimRead   = "P2 reclaim vs read+remove"
	keyP2ReclaimGFloor = "P2 reclaim vs gRPC floor"
	keyP3Ext4          = "P3 ext4"
	keyP3Ext4Objects   = "P3 ext4 objects"
	keyP3XFS           = "P3 xfs"
	keyP3Delete        = "P3 delete"
	keyP4Restore       = "P4 restore"
	keyP5Idle          = "P5 idle"
	keyP5IdleGFloor    = "P5 idle vs gRPC floor"
	keyP5Peak          = "P5 peak"
	keyP5PeakGFloor    = "P5 peak vs gRPC floor"
	keyP5Growth        = "P5 growth"
	keyP6Verbose       = "P6 verbose"
	keyP7Stage         = "P7 stage"
	keyP7Unstage       = "P7 unstage"
	keyP11Bytes        = "P11 delta bytes"
	keyP11Time         = "P11 delta time"
	keyP11Thin         = "P11 thin TiB"
	keyP8Create        = "P8 create"
	keyP8Delete        = "P8 delete"
	keyP8ListVolumes   = "P8 ListVolumes"
	keyP8ListSnapshots = "P8 ListSnapshots"
	keyP8SweepReads    = "P8 sweep reads"
	keyP8SweepTime     = "P8 sweep time"
	keyP8RSS           = "P8 RSS"
	keyP8SweepRSS      = "P8 sweeper RSS"
	keyP9Ops           = "P9 ops"
	keyP9Publish       = "P9 publish"
	keyP9Size          = "P9 size"
	keyP10KRBD         = "P10 krbd"
	keyP10NBD          = "P10 rbd-nbd"
	keyP10Crypt        = "P10 LUKS2"
	keyP10FioRBD       = "P10 fio librbd"
	keyP10KRBDFio      = "P10 krbd vs fio librbd"
	keyP10NBDFio       = "P10 rbd-nbd vs fio librbd"
	keyP10CryptFio     = "P10 LUKS2 vs fio librbd"
	keyP10CryptKRBD    = "P10 LUKS2 vs krbd"
)

// p10Versus is P10's baseline; p10VersusFio the same library driven by
// the device sides' load generator.
const (
	p10Versus    = "rbd bench (librbd, its cache off) on an image of the same features, the same pattern, I/Os in flight and total, in the same guest and round"
	p10VersusFio = "fio through librbd on rbd bench's image, in the same guest and round: the same load generator as the device's"
)

// targets is the table, in the order the results print it.
func targets() []target {
	raw := "raw librbd in the bench's process (create the image with its one metadata key)"
	ts := []target{
		{Key: keyP1Create, ID: "P1", Measure: "CreateVolume/s at each concurrency", Versus: raw, Judge: atLeast, Limit: 0.95},
		{Key: keyP1CreateGFloor, ID: "P1", Measure: "CreateVolume/s at each concurrency", Versus: "the gRPC floor"},
		{Key: keyP1GFloorRaw, ID: "P1", Measure: "the gRPC floor's CreateVolume/s (not the driver)", Versus: raw},
		{Key: keyP2Reclaim, ID: "P2", Measure: "DeleteVolume/s until the pool holds nothing of the volumes", Versus: "raw librbd image removal", Judge: atLeast, Limit: 0.95},
		{Key: keyP2ReclaimRead, ID: "P2", Measure: "DeleteVolume/s until reclaimed", Versus: "raw librbd image read, then removal: the least a delete that checks first can do", Judge: atLeast, Limit: 0.95},
		{Key: keyP2ReclaimGFloor, ID: "P2", Measure: "DeleteVolume/s until reclaimed", Versus: "the gRPC floor (read, then remove)"},
		{Key: keyP3Ext4, ID: "P3", Measure: "ext4 NodeStage + NodeUnstage of a fresh 1 TiB volume", Versus: "the same of a 1 GiB volume", Judge: atMost, Limit: 1.2},
		{Key: keyP3Ext4Objects, ID: "P3", Measure: "RBD objects an ext4 stage + unstage leaves in the image", Versus: "the objects holding what the filesystem needs written: superblock and group descriptor copies, initialised bitmaps, used inode table blocks, directories, the resize inode's and the journal's own blocks (dumpe2fs and debugfs of the made filesystem)", Judge: noneBeyond, Unit: "objects"},
		{Key: keyP3XFS, ID: "P3", Measure: "xfs NodeStage + NodeUnstage of a fresh 1 TiB volume", Versus: "the same of a 1 GiB volume", Judge: atMost, Limit: 1.5},
		{Key: keyP3Delete, ID: "P3", Measure: "DeleteVolume of a staged-then-unstaged 1 TiB volume", Versus: "the same of a 1 GiB volume", Judge: atMost, Limit: 2},
		{Key: keyP4Restore, ID: "P4", Measure: "CreateVolume from a snapshot of a volume with data written", Versus: "from a snapshot of an empty volume", Judge: atMost, Limit: 1.2},
		{Key: keyP5Idle, ID: "P5", Measure: "plugin RSS idle, after its first Ceph connection", Versus: "a budget; the bare go-ceph client (the floor) beside it", Judge: budget, Limit: 40, Unit: "MiB"},
		{Key: keyP5IdleGFloor, ID: "P5", Measure: "plugin RSS idle", Versus: "the gRPC floor's"},
		{Key: keyP5Peak, ID: "P5", Measure: "plugin peak RSS (VmHWM) during P1 at the top concurrency", Versus: "a budget; the floor's peak doing the same Ceph work beside it", Judge: budget, Limit: 55, Unit: "MiB"},
		{Key: keyP5PeakGFloor, ID: "P5", Measure: "plugin peak RSS during P1", Versus: "the gRPC floor's"},
		{Key: keyP5Growth, ID: "P5", Measure: "plugin RSS growth over the second half of the create/delete cycles", Versus: "a budget: no growth", Judge: budget, Limit: 1, Unit: "MiB"},
		{Key: keyP6Verbose, ID: "P6", Measure: "CreateVolume/s at --v=5", Versus: "at --v=2, the manifests' verbosity", Judge: atLeast, Limit: 0.95},
		{Key: keyP7Stage, ID: "P7", Measure: "NodeStage of a batch of volumes at the parallel concurrency (speed-up)", Versus: "at concurrency 1", Invert: true},
		{Key: keyP7Unstage, ID: "P7", Measure: "NodeUnstage of the batch at the parallel concurrency (speed-up)", Versus: "at concurrency 1", Invert: true},
		// 64 MiB rewritten in a volume holding 1 GiB: Ceph reports rewrites
		// of existing data to the byte, so an incremental backup reads
		// about 1/16 of a full one.
		{Key: keyP8Create, ID: "P8", Measure: "CreateVolume/s in a pool of -fill thin images", Versus: "the same in an empty pool, round after round", Judge: atLeast, Limit: 0.9},
		{Key: keyP8Delete, ID: "P8", Measure: "DeleteVolume/s in the full pool", Versus: "the same in an empty pool, round after round", Judge: atLeast, Limit: 0.9},
		{Key: keyP8ListVolumes, ID: "P8", Measure: "a complete paginated ListVolumes: time per 1,000 volumes at -fill volumes", Versus: "the same at a tenth of them (linear: 1.0)", Judge: atMost, Limit: 1.25},
		{Key: keyP8ListSnapshots, ID: "P8", Measure: "a complete paginated ListSnapshots: time per 1,000 images at -fill images", Versus: "the same at a tenth of them (linear: 1.0)", Judge: atMost, Limit: 1.25},
		{Key: keyP8SweepReads, ID: "P8", Measure: "images a sweep reads in an idle full pool (the pass after the first)", Versus: "a budget: none, whatever the pool holds", Judge: zero, Unit: "images"},
		{Key: keyP8SweepTime, ID: "P8", Measure: "a sweep of the idle full pool", Versus: "the first pass after the controller's start (which reads every image)"},
		{Key: keyP8RSS, ID: "P8", Measure: "controller RSS growth with -fill images in its pool (after listing them)", Versus: "a budget over its RSS in the empty pool", Judge: budget, Limit: 10, Unit: "MiB"},
		{Key: keyP8SweepRSS, ID: "P8", Measure: "RSS of a controller that swept the full pool", Versus: "a budget over the listing controller's RSS in the empty pool", Judge: budget, Limit: 10, Unit: "MiB"},
		{Key: keyP9Ops, ID: "P9", Measure: "Ceph operations per second per node of -nodes heartbeating at the deployed interval", Versus: "the same of 1 node (linear: 1.0)", Judge: atMost, Limit: 1.1},
		{Key: keyP9Publish, ID: "P9", Measure: "ControllerPublishVolume latency with -nodes heartbeating", Versus: "with 1 node", Judge: atMost, Limit: 1.5},
		{Key: keyP9Size, ID: "P9", Measure: "node registry object size per node with -nodes", Versus: "with 1 node (linear: 1.0)", Judge: atMost, Limit: 1.1},
		// P10 runs in an emulated guest: its ratios hold no target.
		{Key: keyP10KRBD, ID: "P10", Measure: "IOPS (4K random) and MB/s (1M sequential), write and read, on a block volume mapped with krbd, staged and published by the driver (fio, O_DIRECT, libaio)", Versus: p10Versus},
		{Key: keyP10NBD, ID: "P10", Measure: "the same on a block volume mapped with rbd-nbd", Versus: p10Versus},
		{Key: keyP10Crypt, ID: "P10", Measure: "the same on an encrypted block volume: LUKS2 (dm-crypt) on krbd", Versus: p10Versus},
		{Key: keyP10FioRBD, ID: "P10", Measure: "(not a data path) fio through librbd (its rbd engine), on rbd bench's image", Versus: p10Versus + ": how far the two load generators differ on one path"},
		{Key: keyP10KRBDFio, ID: "P10", Measure: "krbd's figures", Versus: p10VersusFio},
		{Key: keyP10NBDFio, ID: "P10", Measure: "rbd-nbd's figures", Versus: p10VersusFio},
		{Key: keyP10CryptFio, ID: "P10", Measure: "the encrypted volume's figures", Versus: p10VersusFio},
		{Key: keyP10CryptKRBD, ID: "P10", Measure: "the encrypted volume's figures", Versus: "plain krbd's: what dm-crypt adds"},
		{Key: keyP11Bytes, ID: "P11", Measure: "bytes GetMetadataDelta lists for 64 MiB rewritten in a 100 GiB volume holding 1 GiB", Versus: "bytes GetMetadataAllocated lists (a full backup)", Judge: atMost, Limit: 0.1},
		{Key: keyP11Time, ID: "P11", Measure: "GetMetadataDelta's listing time", Versus: "GetMetadataAllocated's"},
		{Key: keyP11Thin, ID: "P11", Measure: "GetMetadataAllocated of a 1 TiB thin volume holding 64 MiB", Versus: "of a 1 GiB volume holding the same", Judge: atMost, Limit: 10},
	}
	for i := range ts {
		ts[i].Target = ts[i].words()
	}
	return ts
}

// words says the target as the table prints it.
func (t target) words() string {
	switch t.Judge {
	case atLeast:
		return fmt.Sprintf(">= %.2f", t.Limit)
	case atMost:
		return fmt.Sprintf("<= %.2f", t.Limit)
	case budget:
		return fmt.Sprintf("<= %g %s", t.Limit, t.Unit)
	case noneBeyond:
		return "none beyond"
	case zero:
		return "none"
	}
	if t.Invert {
		return "(reported; 1.0 = serialised)"
	}
	return "(reported)"
}

// targetOf returns the table's entry for key; a key missing from the
// table is a bug in the bench.
func targetOf(key string) target {
	for _, t := range targets() {
		if t.Key == key {
			return t
		}
	}
	panic("bench: no target for row kind " + key)
}

// judgeRow fills in a row's ID, target and verdict from the table. A
// ratio the caller computed (P1's median of per-round ratios) is kept;
// otherwise it is value/reference. beyond counts the objects beyond the
// reference set, for noneBeyond rows.
func judgeRow(key string, rw row, beyond int) row {
	t := targetOf(key)
	rw.ID, rw.Key, rw.Target = t.ID, t.Key, t.Target
	if rw.Ratio == nil && rw.Ref != nil && *rw.Ref > 0 {
		switch {
		case !t.Invert:
			rw.Ratio = ptr(rw.Value / *rw.Ref)
		case rw.Value > 0:
			rw.Ratio = ptr(*rw.Ref / rw.Value)
		}
	}
	switch t.Judge {
	case atLeast:
		rw.Met = ptr(rw.Ratio != nil && *rw.Ratio >= t.Limit)
	case atMost:
		rw.Met = ptr(rw.Ratio != nil && *rw.Ratio <= t.Limit)
	case budget:
		rw.Met = ptr(rw.Value <= t.Limit)
	case noneBeyond:
		rw.Beyond = ptr(beyond)
		rw.Met = ptr(beyond == 0)
	case zero:
		rw.Met = ptr(rw.Value == 0)
	}
	return rw
}

// printTargets writes the table of targets of the scenarios ids as
// Markdown; every target if ids is empty.
func printTargets(w io.Writer, ids map[string]bool) {
	fmt.Fprintln(w, "| | measure | compared with | target |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range targets() {
		if len(ids) > 0 && !ids[t.ID] {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.ID, t.Measure, t.Versus, t.Target)
	}
}
