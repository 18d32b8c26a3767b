package cluster

import (
	"regexp"
	"strings"
	"testing"
)

// plainName is a clusterID or a RADOS namespace: it goes into volume IDs
// and Ceph object names as it is.
func plainName(s string, max int) bool {
	return len(s) <= max && s != "." && s != ".." && regexp.MustCompile(`^[A-Za-z0-9_.-]+$`).MatchString(s)
}

// monitorChars are what a monitor address holds: host names, IPv4 and
// IPv6 addresses, ports, v1:/v2: prefixes, [a,b] lists and /nonce.
var monitorChars = regexp.MustCompile(`^[A-Za-z0-9.:\[\],/_-]+$`)

func FuzzParseMap(f *testing.F) {
	f.Add([]byte(`[{"clusterID":"c1","monitors":["v2:127.0.0.1:3300"]}]`))
	f.Add([]byte(`[{"clusterID":"c2","monitors":["[v2:[::1]:3300,v1:[::1]:6789]"],"rbd":{"radosNamespace":"tenant-a"}}]`))
	f.Add([]byte(`[{"clusterID":"c1","monitors":["a:1"]},{"clusterID":"c1","monitors":["b:1"]}]`))
	f.Add([]byte(`[{"clusterID":"c1","monitors":["--keyring=/x"]}]`))
	f.Add([]byte(`[{"clusterID":"c1","monitors":["a:1"],"cephFS":{}}]`))
	f.Add([]byte(`[{"clusterID":"b","monitors":["a:1"],"peerClusterIDs":["a","c"]}]`))
	f.Add([]byte(`[{"clusterID":"b","monitors":["a:1"],"peerClusterIDs":["b"]}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, err := ParseMap(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, c := range cs {
			seen[c.ClusterID] = false
		}
		peers := map[string]bool{}
		for _, c := range cs {
			// A peer's clusterID resolves to one entry only.
			for _, p := range c.PeerClusterIDs {
				if _, own := seen[p]; own || peers[p] || !plainName(p, 40) {
					t.Fatalf("accepted peer clusterID %q of %q", p, c.ClusterID)
				}
				peers[p] = true
			}
		}
		for _, c := range cs {
			// clusterIDs go into volume IDs and name the map's entries.
			if !plainName(c.ClusterID, 40) || seen[c.ClusterID] {
				t.Fatalf("accepted clusterID %q (seen before: %v)", c.ClusterID, seen[c.ClusterID])
			}
			seen[c.ClusterID] = true
			if len(c.Monitors) == 0 {
				t.Fatalf("accepted cluster %q without monitors", c.ClusterID)
			}
			// Monitors reach the tools as --mon-host=a,b and librados as
			// mon_host: nothing that reads as a flag, a space or another key.
			for _, m := range c.Monitors {
				if len(m) > 256 || strings.HasPrefix(m, "-") || !monitorChars.MatchString(m) {
					t.Fatalf("accepted monitor %q", m)
				}
			}
			if ns := c.Namespace(); ns != "" && !plainName(ns, 32) {
				t.Fatalf("accepted radosNamespace %q", ns)
			}
		}
	})
}
