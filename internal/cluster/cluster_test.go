package cluster

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMap(t *testing.T) {
	good := `[{"clusterID":"c1","monitors":["v2:127.0.0.1:3300","10.0.0.2:6789"]},{"clusterID":"c2","monitors":["[v2:[::1]:3300,v1:[::1]:6789]"]}]`
	cs, err := ParseMap([]byte(good))
	if err != nil || len(cs) != 2 || cs[0].MonHost() != "v2:127.0.0.1:3300,10.0.0.2:6789" {
		t.Fatalf("ParseMap = %+v, %v", cs, err)
	}
	if cs[0].Namespace() != "" {
		t.Errorf("namespace %q without an rbd section", cs[0].Namespace())
	}
	// ceph-csi's per-cluster RBD section.
	cs, err = ParseMap([]byte(`[{"clusterID":"t1","monitors":["m:1"],"rbd":{"radosNamespace":"tenant-1"}}]`))
	if err != nil || cs[0].Namespace() != "tenant-1" {
		t.Fatalf("radosNamespace: %+v, %v", cs, err)
	}
	for name, bad := range map[string]string{
		"bad namespace":     `[{"clusterID":"c1","monitors":["m:1"],"rbd":{"radosNamespace":"a/b"}}]`,
		"unknown rbd field": `[{"clusterID":"c1","monitors":["m:1"],"rbd":{"netNamespaceFilePath":"/x"}}]`,
		"not a list":        `{"clusterID":"c1"}`,
		"unknown field":     `[{"clusterID":"c1","monitors":["m:1"],"extra":1}]`,
		"no monitors":       `[{"clusterID":"c1","monitors":[]}]`,
		"duplicate":         `[{"clusterID":"c1","monitors":["m:1"]},{"clusterID":"c1","monitors":["m:2"]}]`,
		"bad id":            `[{"clusterID":"../etc","monitors":["m:1"]}]`,
		"empty id":          `[{"clusterID":"","monitors":["m:1"]}]`,
		"option injection":  `[{"clusterID":"c1","monitors":["--keyring=/x"]}]`,
		"shell chars":       `[{"clusterID":"c1","monitors":["m:1;reboot"]}]`,
		"trailing data":     `[] []`,
		"huge":              "[" + strings.Repeat(" ", maxMapBytes) + "]",
	} {
		if _, err := ParseMap([]byte(bad)); err == nil {
			t.Errorf("%s: accepted %.60q", name, bad)
		}
	}
}

func TestMapReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clusters.json")
	write := func(s string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	write(`[{"clusterID":"a","monitors":["m:1"]}]`, now.Add(-time.Hour))
	m, err := LoadMap(path)
	if err != nil {
		t.Fatal(err)
	}
	m.interval = 0 // check the file on every call
	if _, err := m.Lookup("a"); err != nil {
		t.Fatal(err)
	}
	write(`[{"clusterID":"b","monitors":["m:2"]}]`, now)
	if _, err := m.Lookup("b"); err != nil {
		t.Fatalf("new cluster not picked up: %v", err)
	}
	write(`not json`, now.Add(time.Minute))
	if m.Health() == nil {
		t.Fatal("a broken map on disk did not make the map unhealthy")
	}
	if _, err := m.Lookup("b"); err != nil {
		t.Fatalf("the last good map was dropped: %v", err)
	}
	if _, err := LoadMap(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing map loaded")
	}
}

func TestCredentials(t *testing.T) {
	key := "AQBo3ZJkAAAAABAA4tZzC4Uo0pC6Rz2xkW7b8g=="
	c, err := CredentialsFromSecrets(map[string]string{"userID": "client.csi", "userKey": key})
	if err != nil || c.ID != "csi" || c.Key != key {
		t.Fatalf("got %+v, %v", c, err)
	}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, key) {
			t.Fatalf("credentials print their key: %s", s)
		}
	}
	for name, secrets := range map[string]map[string]string{
		"missing key": {"userID": "csi"},
		"missing id":  {"userKey": key},
		"option id":   {"userID": "--admin", "userKey": key},
		"space id":    {"userID": "a b", "userKey": key},
		"bad key":     {"userID": "csi", "userKey": "abc;rm -rf /"},
	} {
		_, err := CredentialsFromSecrets(secrets)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if v := secrets["userKey"]; v != "" && strings.Contains(err.Error(), v) {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
}

func TestKeyTypes(t *testing.T) {
	key := func(typ byte) string {
		return base64.StdEncoding.EncodeToString(append([]byte{typ, 0}, make([]byte, 28)...))
	}
	einval := errors.New("connecting to monitors: invalid argument: rados: ret=-22, Invalid argument")
	for _, tc := range []struct {
		key, want string
		hint      bool
	}{
		{key(1), KeyTypeAES, false},
		{key(2), KeyTypeAES256K, true},
		{key(7), "type 7", false},
		{"not base64!", "", false},
	} {
		c := Credentials{ID: "csi", Key: tc.key}
		if got := c.KeyType(); got != tc.want {
			t.Errorf("KeyType(%q) = %q, want %q", tc.key, got, tc.want)
		}
		err := c.UnusableKey(einval)
		if hinted := err != einval; hinted != tc.hint {
			t.Errorf("%q: hinted %v, want %v: %v", tc.key, hinted, tc.hint, err)
		}
		if !errors.Is(err, einval) || strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: the hint drops the cause or shows the key: %v", tc.key, err)
		}
	}
	c := Credentials{ID: "csi", Key: key(2)}
	if other := errors.New("pool not found"); c.UnusableKey(other) != other {
		t.Errorf("an unrelated failure got the key hint")
	}
	if c.UnusableKey(nil) != nil {
		t.Errorf("no error became one")
	}
}

// On a mirror site, a volume ID of the peer's cluster resolves to the
// entry that holds the copies of its images; an ID that could resolve
// two ways never loads.
func TestPeerClusterIDs(t *testing.T) {
	cs, err := ParseMap([]byte(`[{"clusterID":"site-b","monitors":["m:1"],"rbd":{"radosNamespace":"t1"},"peerClusterIDs":["site-a","site-c"]},{"clusterID":"other","monitors":["m:2"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	m := NewStaticMap(cs)
	for _, id := range []string{"site-b", "site-a", "site-c"} {
		c, err := m.Lookup(id)
		if err != nil || c.ClusterID != "site-b" || c.MonHost() != "m:1" || c.Namespace() != "t1" {
			t.Errorf("Lookup(%q) = %+v, %v; want the entry site-b", id, c, err)
		}
	}
	if c, err := m.Lookup("other"); err != nil || c.MonHost() != "m:2" {
		t.Errorf("Lookup(other) = %+v, %v", c, err)
	}
	if _, err := m.Lookup("site-d"); !errors.Is(err, ErrUnknown) {
		t.Errorf("an ID nobody lists: %v, want ErrUnknown", err)
	}
	if len(m.All()) != 2 {
		t.Errorf("All lists %d entries, want the 2 of the map (peers are no entries)", len(m.All()))
	}
	for name, bad := range map[string]string{
		"peer is an entry":  `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":["b"]},{"clusterID":"b","monitors":["m:2"]}]`,
		"peer of itself":    `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":["a"]}]`,
		"peer listed twice": `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":["p"]},{"clusterID":"b","monitors":["m:2"],"peerClusterIDs":["p"]}]`,
		"peer twice in one": `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":["p","p"]}]`,
		"malformed peer":    `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":["../x"]}]`,
		"empty peer":        `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":[""]}]`,
		"peers not a list":  `[{"clusterID":"a","monitors":["m:1"],"peerClusterIDs":"p"}]`,
		"unknown peer key":  `[{"clusterID":"a","monitors":["m:1"],"peers":["p"]}]`,
	} {
		if _, err := ParseMap([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A reloaded map's peers replace the old ones.
func TestPeerClusterIDsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clusters.json")
	write := func(s string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	write(`[{"clusterID":"b","monitors":["m:1"],"peerClusterIDs":["a"]}]`, now.Add(-time.Hour))
	m, err := LoadMap(path)
	if err != nil {
		t.Fatal(err)
	}
	m.interval = 0
	if c, err := m.Lookup("a"); err != nil || c.ClusterID != "b" {
		t.Fatalf("Lookup(a) = %+v, %v", c, err)
	}
	write(`[{"clusterID":"b","monitors":["m:1"]}]`, now)
	if _, err := m.Lookup("a"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a peer dropped from the map still resolves: %v", err)
	}
}
