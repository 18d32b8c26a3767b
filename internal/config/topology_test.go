package config

import (
	"strings"
	"testing"
)

func TestTopologyConstrainedPools(t *testing.T) {
	base := map[string]string{ParamClusterID: "c1"}
	with := func(v string, extra ...string) map[string]string {
		m := map[string]string{ParamTopologyConstrainedPools: v}
		for k, x := range base {
			m[k] = x
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	good := `[{"poolName":"east","dataPool":"east-ec","domainSegments":[{"domainLabel":"region","value":"eu"},{"domainLabel":"zone","value":"east-1"}]},
		{"poolName":"west","domainSegments":[{"domainLabel":"zone","value":"west-1"}]}]`
	p, err := ParseParams(with(good))
	if err != nil {
		t.Fatalf("a class with topology pools and no pool: %v", err)
	}
	if len(p.TopologyPools) != 2 || p.TopologyPools[0].DataPool != "east-ec" || p.Pool != "" {
		t.Fatalf("parsed %+v", p)
	}
	east := p.TopologyPools[0]
	seg := east.Segments("rbd.csi.rbdcsi.dev")
	if seg["topology.rbd.csi.rbdcsi.dev/zone"] != "east-1" || seg["topology.rbd.csi.rbdcsi.dev/region"] != "eu" || len(seg) != 2 {
		t.Errorf("segments %v", seg)
	}
	node := map[string]string{"topology.rbd.csi.rbdcsi.dev/zone": "east-1", "topology.rbd.csi.rbdcsi.dev/region": "eu", "topology.rbd.csi.rbdcsi.dev/rack": "r1"}
	if !east.Serves("rbd.csi.rbdcsi.dev", node) {
		t.Error("east does not serve a node of its region and zone")
	}
	delete(node, "topology.rbd.csi.rbdcsi.dev/region")
	if east.Serves("rbd.csi.rbdcsi.dev", node) {
		t.Error("east serves a topology that lacks its region")
	}
	if east.Serves("other.driver", seg) {
		t.Error("a topology of another driver's keys matches")
	}
	if _, err := ParseParams(with(good, ParamPool, "rbd")); err != nil {
		t.Errorf("topology pools beside a pool for requests without topology: %v", err)
	}

	for what, v := range map[string]string{
		"not JSON":           `{"poolName":`,
		"not a list":         `{"poolName":"a","domainSegments":[{"domainLabel":"zone","value":"a"}]}`,
		"empty":              `[]`,
		"unknown field":      `[{"pool":"a","domainSegments":[{"domainLabel":"zone","value":"a"}]}]`,
		"no pool name":       `[{"domainSegments":[{"domainLabel":"zone","value":"a"}]}]`,
		"bad pool name":      `[{"poolName":"a/b","domainSegments":[{"domainLabel":"zone","value":"a"}]}]`,
		"bad data pool":      `[{"poolName":"a","dataPool":"x y","domainSegments":[{"domainLabel":"zone","value":"a"}]}]`,
		"no segments":        `[{"poolName":"a","domainSegments":[]}]`,
		"pool twice":         `[{"poolName":"a","domainSegments":[{"domainLabel":"zone","value":"a"}]},{"poolName":"a","domainSegments":[{"domainLabel":"zone","value":"b"}]}]`,
		"label twice":        `[{"poolName":"a","domainSegments":[{"domainLabel":"zone","value":"a"},{"domainLabel":"zone","value":"b"}]}]`,
		"label with a slash": `[{"poolName":"a","domainSegments":[{"domainLabel":"topology.kubernetes.io/zone","value":"a"}]}]`,
		"bad value":          `[{"poolName":"a","domainSegments":[{"domainLabel":"zone","value":"a b"}]}]`,
	} {
		if _, err := ParseParams(with(v)); err == nil || !strings.Contains(err.Error(), ParamTopologyConstrainedPools) {
			t.Errorf("%s: %v, want an error naming %s", what, err, ParamTopologyConstrainedPools)
		}
	}
	if _, err := ParseParams(base); err == nil || !strings.Contains(err.Error(), ParamTopologyConstrainedPools) {
		t.Errorf("no pool and no topology pools: %v", err)
	}
}

func TestDomainLabelName(t *testing.T) {
	for in, want := range map[string]string{"topology.kubernetes.io/zone": "zone", "rack": "rack", "example.com/a/b": "b"} {
		if got := DomainLabelName(in); got != want {
			t.Errorf("DomainLabelName(%q) = %q, want %q", in, got, want)
		}
	}
}
