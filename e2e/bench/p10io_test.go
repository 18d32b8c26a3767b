package main

import (
	"math"
	"testing"
)

func TestParseRBDBench(t *testing.T) {
	out := `bench  type write io_size 4096 io_threads 16 bytes 16777216 pattern random
  SEC       OPS   OPS/SEC   BYTES/SEC
    1      2400      2416   9.4 MiB/s
elapsed: 1   ops: 4096   ops/sec: 2245.61   bytes/sec: 8.8 MiB/s
`
	r, err := parseRBDBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.IOPS != 2245.61 || math.Abs(r.Seconds-4096/2245.61) > 1e-9 {
		t.Errorf("got %+v", r)
	}
	if _, err := parseRBDBench("bench  type write\n  SEC  OPS\n"); err == nil {
		t.Error("no result line: want an error")
	}
}

func TestParseFio(t *testing.T) {
	out := `note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.39",
  "jobs" : [
    {
      "jobname" : "p10",
      "error" : 0,
      "read" : {"io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0,
        "clat_ns" : {"mean" : 0.0, "percentile" : {}}},
      "write" : {"io_bytes" : 16777216, "bw_bytes" : 3416000, "iops" : 834.1, "runtime" : 4910,
        "clat_ns" : {"mean" : 19000000.5, "percentile" : {"50.000000" : 17000000, "99.000000" : 60000000}}}
    }
  ]
}`
	r, err := parseFio(out, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.IOPS != 834.1 || r.Seconds != 4.91 || math.Abs(r.LatMeanMs-19.0000005) > 1e-9 || r.LatP99Ms != 60 {
		t.Errorf("got %+v", r)
	}
	if _, err := parseFio(out, false); err == nil {
		t.Error("a read of nothing: want an error")
	}
}

func TestP10Pattern(t *testing.T) {
	for _, c := range []struct {
		p          p10Pattern
		rw, unit   string
		iops, want float64
	}{
		{p10Patterns[0], "write", "MB/s", 40, 40 * 1.048576},
		{p10Patterns[1], "read", "MB/s", 10, 10 * 1.048576},
		{p10Patterns[2], "randwrite", "IOPS", 900, 900},
		{p10Patterns[3], "randread", "IOPS", 2000, 2000},
	} {
		if got := c.p.fioRW(); got != c.rw {
			t.Errorf("%s: fio rw %q, want %q", c.p.Name, got, c.rw)
		}
		if got := c.p.unit(); got != c.unit {
			t.Errorf("%s: unit %q, want %q", c.p.Name, got, c.unit)
		}
		if got := c.p.figure(c.iops); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: figure %v, want %v", c.p.Name, got, c.want)
		}
	}
}

// A row's ratio is the median of the rounds' ratios, its figures the
// medians of each side's.
func TestP10Rows(t *testing.T) {
	b := &bench{cfg: benchConfig{dataDepth: 16, dataSeq: 512 * mib, dataRand: 32 * mib}, rep: &report{}}
	var samples []p10Sample
	for round, f := range []struct{ rbd, fio, krbd float64 }{{100, 80, 50}, {200, 90, 60}, {110, 100, 99}} {
		for _, pat := range p10Patterns {
			for side, v := range map[string]float64{p10RBDBench: f.rbd, p10FioRBD: f.fio, p10KRBD: f.krbd, p10NBD: 1, p10Crypt: 2} {
				samples = append(samples, p10Sample{Side: side, Pattern: pat.Name, Round: round + 1, Figure: v, Load: &loadSpan{}})
			}
		}
	}
	b.p10Rows(samples)
	if len(b.rep.Rows) != 8*len(p10Patterns) {
		t.Fatalf("%d rows, want %d", len(b.rep.Rows), 8*len(p10Patterns))
	}
	r := b.rep.Rows[0] // krbd vs rbd bench, the first pattern
	if r.Key != keyP10KRBD || r.Value != 60 || *r.Ref != 110 || math.Abs(*r.Ratio-0.5) > 1e-9 || r.Unit != "MB/s" || r.Target != "(reported)" {
		t.Errorf("first row: %+v (ratio %v)", r, deref(r.Ratio))
	}
	r = b.rep.Rows[len(b.rep.Rows)-1] // LUKS2 vs krbd, the last pattern
	if r.Key != keyP10CryptKRBD || r.Unit != "IOPS" || math.Abs(*r.Ratio-2.0/60) > 1e-9 {
		t.Errorf("last row: %+v (ratio %v)", r, deref(r.Ratio))
	}
}
