// Package ranges reads and judges the byte ranges the SnapshotMetadata
// service lists, for the suites that ask it: e2e/controller and e2e/node
// over the plugin's socket, e2e/k8s through the sidecar.
package ranges

import (
	"errors"
	"io"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Range is [Off, Off+N) of a volume.
type Range struct{ Off, N int64 }

// Of makes ranges of offset and length pairs: Of(0, 4096, 1<<20, 512).
func Of(offLen ...int64) []Range {
	if len(offLen)%2 != 0 {
		panic("ranges.Of: an offset without its length")
	}
	out := make([]Range, 0, len(offLen)/2)
	for i := 0; i < len(offLen); i += 2 {
		out = append(out, Range{Off: offLen[i], N: offLen[i+1]})
	}
	return out
}

// End is the first byte after r.
func (r Range) End() int64 { return r.Off + r.N }

// Read reads a whole SnapshotMetadata stream through recv (one message's
// ranges and volume size, or io.EOF at the end): every message carries
// the volume's size, and the ranges come in order, none empty, none
// overlapping the one before.
func Read(t testing.TB, size int64, recv func() ([]*csi.BlockMetadata, int64, error)) []Range {
	t.Helper()
	var out []Range
	for {
		blocks, capacity, err := recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading the SnapshotMetadata stream: %v", err)
		}
		if capacity != size {
			t.Fatalf("volume_capacity_bytes %d, want %d", capacity, size)
		}
		for _, b := range blocks {
			if n := len(out); b.SizeBytes <= 0 || n > 0 && b.ByteOffset < out[n-1].End() {
				t.Fatalf("range %d+%d is empty or overlaps the one before (%v)", b.ByteOffset, b.SizeBytes, out)
			}
			out = append(out, Range{Off: b.ByteOffset, N: b.SizeBytes})
		}
	}
}

// Equal fails t unless got is want, range for range.
func Equal(t testing.TB, what string, got, want []Range) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// Covers fails t unless got holds every byte of want (checked every 4 KiB)
// and nothing beyond want rounded out to whole objects of grain bytes:
// Ceph may report a changed range so.
func Covers(t testing.TB, what string, got, want []Range, grain int64) {
	t.Helper()
	in := func(rs []Range, off int64) bool {
		for _, r := range rs {
			if r.Off <= off && off < r.End() {
				return true
			}
		}
		return false
	}
	for _, w := range want {
		for off := w.Off; off < w.End(); off += 4096 {
			if !in(got, off) {
				t.Fatalf("%s: %v misses byte %d of %v", what, got, off, want)
			}
		}
	}
	var rounded []Range
	for _, w := range want {
		lo := w.Off / grain * grain
		hi := (w.End() + grain - 1) / grain * grain
		rounded = append(rounded, Range{Off: lo, N: hi - lo})
	}
	for _, g := range got {
		if !in(rounded, g.Off) || !in(rounded, g.End()-1) {
			t.Fatalf("%s: %v reaches past %v (whole objects of %v)", what, got, rounded, want)
		}
	}
}
