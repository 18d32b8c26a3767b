package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestSideEnvPinsEveryKnob(t *testing.T) {
	base := []string{"PATH=/usr/bin", "CEPH_CONF=/x/ceph.conf", "MALLOC_ARENA_MAX=2", "MALLOC_TRIM_THRESHOLD_=1", "GOGC=50", "GODEBUG=madvdontneed=1", "LD_PRELOAD=/lib/libjemalloc.so"}
	env := sideEnv(base, 3)
	want := []string{"PATH=/usr/bin", "CEPH_CONF=/x/ceph.conf", "GOMAXPROCS=3", "GOGC=100", "GOMEMLIMIT=off", "MALLOC_ARENA_MAX=8"}
	if !slices.Equal(env, want) {
		t.Errorf("sideEnv = %q, want %q", env, want)
	}
	gov := governedIn(env, 3)
	for k, v := range map[string]string{"GOMAXPROCS": "3", "MALLOC_ARENA_MAX": "8", "GODEBUG": "(unset)", "LD_PRELOAD": "(unset)"} {
		if gov[k] != v {
			t.Errorf("governedIn[%s] = %q, want %q", k, gov[k], v)
		}
	}
	if _, ok := gov["MALLOC_TRIM_THRESHOLD_"]; ok {
		t.Errorf("MALLOC_TRIM_THRESHOLD_ survived: %v", gov)
	}
	// Pinning twice changes nothing: the restarted bench does not restart again.
	if again := governedIn(sideEnv(env, 3), 3); !maps.Equal(again, gov) {
		t.Errorf("second pass %v, first %v", again, gov)
	}
}

// TestSidesStartedAlike starts processes through the launcher and reads
// them back from /proc: one started under the sides' environment passes,
// one started under another is refused, naming the variable.
func TestSidesStartedAlike(t *testing.T) {
	dir := t.TempDir()
	env := sideEnv([]string{"PATH=/usr/bin:/bin"}, 2)
	start := func(name string, env []string) sideInfo {
		p, err := startProc(dir, name, "sleep", env, []string{"60"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		info, err := inspect(p.pid(), 2)
		if err != nil {
			t.Fatal(err)
		}
		info.Name = name
		return info
	}
	first := start("first", env)
	r := &sidesReport{Env: first.Env, CPUs: first.CPUs, Nice: first.Nice, Cgroup: first.Cgroup}
	if err := r.addSide(start("alike", env)); err != nil {
		t.Errorf("a side started alike was refused: %v", err)
	}
	other := append(slices.Clone(env), "MALLOC_ARENA_MAX=2")
	err := r.addSide(start("other", other))
	if err == nil || !strings.Contains(err.Error(), "MALLOC_ARENA_MAX=2, not 8") {
		t.Errorf("a side with another MALLOC_ARENA_MAX: err = %v", err)
	}
}
