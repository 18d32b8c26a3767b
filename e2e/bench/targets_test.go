package main

import (
	"math"
	"testing"
)

func TestTargetTable(t *testing.T) {
	seen := map[string]bool{}
	for _, tg := range targets() {
		if seen[tg.Key] {
			t.Errorf("key %q twice", tg.Key)
		}
		seen[tg.Key] = true
		if tg.ID == "" || tg.Measure == "" || tg.Versus == "" {
			t.Errorf("%q does not say what it compares with what: %+v", tg.Key, tg)
		}
		if (tg.Judge == reported) != (tg.Limit == 0) && tg.Judge != noneBeyond && tg.Judge != zero {
			t.Errorf("%q: a reported row has no limit, a judged one has one: %+v", tg.Key, tg)
		}
	}
	// No target against the gRPC floor: those rows explain, raw librbd is the limit.
	for _, k := range []string{keyP1CreateGFloor, keyP2ReclaimGFloor, keyP5IdleGFloor, keyP5PeakGFloor, keyP1GFloorRaw} {
		if tg := targetOf(k); tg.Judge != reported || tg.Target != "(reported)" {
			t.Errorf("%q is judged: %+v", k, tg)
		}
	}
}

func TestJudgeRow(t *testing.T) {
	cases := []struct {
		key         string
		value, ref  float64
		ratio       *float64
		beyond      int
		wantMet     *bool
		wantRatio   float64
		wantDisplay string
	}{
		{key: keyP1Create, value: 94, ref: 100, wantMet: ptr(false), wantRatio: 0.94, wantDisplay: ">= 0.95"},
		{key: keyP1Create, value: 94, ref: 100, ratio: ptr(0.96), wantMet: ptr(true), wantRatio: 0.96, wantDisplay: ">= 0.95"},
		{key: keyP3Ext4, value: 0.25, ref: 0.2, wantMet: ptr(false), wantRatio: 1.25, wantDisplay: "<= 1.20"},
		{key: keyP5Idle, value: 39, ref: 36, wantMet: ptr(true), wantRatio: 39.0 / 36, wantDisplay: "<= 40 MiB"},
		{key: keyP5PeakGFloor, value: 77.8, ref: 71.2, wantRatio: 77.8 / 71.2, wantDisplay: "(reported)"},
		{key: keyP7Stage, value: 1, ref: 2, wantRatio: 2, wantDisplay: "(reported; 1.0 = serialised)"},
		{key: keyP3Ext4Objects, value: 28, ref: 26, beyond: 2, wantMet: ptr(false), wantRatio: 28.0 / 26, wantDisplay: "none beyond"},
		{key: keyP3Ext4Objects, value: 26, ref: 26, wantMet: ptr(true), wantRatio: 1, wantDisplay: "none beyond"},
		{key: keyP8SweepReads, value: 0, ref: 1000, wantMet: ptr(true), wantRatio: 0, wantDisplay: "none"},
		{key: keyP8SweepReads, value: 3, ref: 1000, wantMet: ptr(false), wantRatio: 0.003, wantDisplay: "none"},
	}
	for _, c := range cases {
		rw := vs("m", "x", c.value, c.ref, "ref")
		rw.Ratio = c.ratio
		got := judgeRow(c.key, rw, c.beyond)
		if (got.Met == nil) != (c.wantMet == nil) || (got.Met != nil && *got.Met != *c.wantMet) {
			t.Errorf("%s %v/%v: met %v, want %v", c.key, c.value, c.ref, deref(got.Met), deref(c.wantMet))
		}
		if got.Ratio == nil || math.Abs(*got.Ratio-c.wantRatio) > 1e-9 || got.Target != c.wantDisplay || got.ID == "" {
			t.Errorf("%s: ratio %v target %q id %q, want %v %q", c.key, deref(got.Ratio), got.Target, got.ID, c.wantRatio, c.wantDisplay)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
