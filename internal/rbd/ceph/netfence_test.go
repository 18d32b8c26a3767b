package ceph

import (
	"net/netip"
	"testing"
)

// A client instance is barred by its own entry, its host's (nonce 0) or a
// range holding its IP; another instance's entry does not bar it.
func TestBars(t *testing.T) {
	host := func(s string, n uint64) entry { return entry{prefix: netip.MustParsePrefix(s), instance: n} }
	ip := netip.MustParseAddr("10.0.0.5")
	for _, tc := range []struct {
		name          string
		hosts, ranges []entry
		want          bool
	}{
		{"nothing", nil, nil, false},
		{"its own entry", []entry{host("10.0.0.5/32", 77)}, nil, true},
		{"another instance", []entry{host("10.0.0.5/32", 78)}, nil, false},
		{"its host", []entry{host("10.0.0.5/32", 0)}, nil, true},
		{"another host", []entry{host("10.0.0.6/32", 0)}, nil, false},
		{"a range", nil, []entry{host("10.0.0.0/24", 0)}, true},
		{"another range", nil, []entry{host("10.0.1.0/24", 0)}, false},
	} {
		if got := bars(tc.hosts, tc.ranges, ip, 77); got != tc.want {
			t.Errorf("%s: bars = %v, want %v", tc.name, got, tc.want)
		}
	}
}
