package harness

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Blocklist reads the cluster's OSD blocklist: each client address on it
// and when its entry expires.
func (c Cluster) Blocklist(t testing.TB) map[string]time.Time {
	t.Helper()
	out, err := c.Ceph("osd", "blocklist", "ls", "--format", "json")
	Must(t, err, "ceph osd blocklist ls: %s", out)
	var entries []struct {
		Addr  string `json:"addr"`
		Until string `json:"until"`
	}
	// Pacific prints a second list after it, of range entries: read the first.
	Must(t, json.NewDecoder(strings.NewReader(out)).Decode(&entries), "ceph osd blocklist ls: %s", out)
	list := map[string]time.Time{}
	for _, e := range entries {
		until, err := time.Parse("2006-01-02T15:04:05.999999-0700", e.Until)
		Must(t, err, "expiry of blocklist entry %s", e.Addr)
		list[e.Addr] = until
	}
	return list
}

// Unblocklist removes a blocklist entry as admin, for a test's cleanup.
func (c Cluster) Unblocklist(t testing.TB, addr string) {
	t.Helper()
	if out, err := c.Ceph("osd", "blocklist", "rm", addr); err != nil {
		t.Errorf("ceph osd blocklist rm %s: %v: %s", addr, err, out)
	}
}

// Watchers lists the addresses of the clients that have an image of the
// test pool open read-write (rbd status).
func (c Cluster) Watchers(t testing.TB, image string) []string {
	t.Helper()
	out, err := c.RBD(append([]string{"status", "--format", "json", c.Pool + "/" + image}, c.NamespaceArgs()...)...)
	Must(t, err, "rbd status %s: %s", image, out)
	var st struct {
		Watchers []struct {
			Address string `json:"address"`
		} `json:"watchers"`
	}
	Must(t, json.Unmarshal([]byte(out), &st), "rbd status %s: %s", image, out)
	var addrs []string
	for _, w := range st.Watchers {
		addrs = append(addrs, w.Address)
	}
	return addrs
}

// Lockers lists the addresses of the clients holding a lock on an image
// of the test pool (rbd lock ls): its exclusive lock's holder, which keeps
// it after Ceph timed out its watch.
func (c Cluster) Lockers(t testing.TB, image string) []string {
	t.Helper()
	out, err := c.RBD(append([]string{"lock", "ls", "--format", "json", c.Pool + "/" + image}, c.NamespaceArgs()...)...)
	Must(t, err, "rbd lock ls %s: %s", image, out)
	var locks []struct {
		Address string `json:"address"`
	}
	Must(t, json.Unmarshal([]byte(out), &locks), "rbd lock ls %s: %s", image, out)
	var addrs []string
	for _, l := range locks {
		addrs = append(addrs, l.Address)
	}
	return addrs
}
