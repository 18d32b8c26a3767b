package config

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseClusters(t *testing.T) {
	good := `[{"clusterID":"c1","monitors":["v2:127.0.0.1:3300","10.0.0.2:6789"]},{"clusterID":"c2","monitors":["[v2:[::1]:3300,v1:[::1]:6789]"]}]`
	cs, err := ParseClusters([]byte(good))
	if err != nil || len(cs) != 2 || cs[0].MonHost() != "v2:127.0.0.1:3300,10.0.0.2:6789" {
		t.Fatalf("ParseClusters = %+v, %v", cs, err)
	}
	if cs[0].Namespace() != "" {
		t.Errorf("namespace %q without an rbd section", cs[0].Namespace())
	}
	// ceph-csi's per-cluster RBD section.
	cs, err = ParseClusters([]byte(`[{"clusterID":"t1","monitors":["m:1"],"rbd":{"radosNamespace":"tenant-1"}}]`))
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
		if _, err := ParseClusters([]byte(bad)); err == nil {
			t.Errorf("%s: accepted %.60q", name, bad)
		}
	}
}

func TestClusterMapReloads(t *testing.T) {
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
	m, err := LoadClusterMap(path)
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
	if _, err := LoadClusterMap(filepath.Join(t.TempDir(), "missing")); err == nil {
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

func TestVolumeFeatures(t *testing.T) {
	for _, c := range []struct {
		name        string
		params      map[string]string
		multiWriter bool
		want        string // "" means refused
		because     string
	}{
		{"default", nil, false, "layering,exclusive-lock,object-map,fast-diff,deep-flatten", ""},
		{"default, several writers", nil, true, "layering,deep-flatten", ""},
		{"the StorageClass's win", map[string]string{"imageFeatures": "layering"}, false, "layering", ""},
		{"even for several writers", map[string]string{"imageFeatures": "exclusive-lock,layering"}, true, "exclusive-lock,layering", ""},
		{"journaling with nbd", map[string]string{"mounter": "nbd", "imageFeatures": "layering,exclusive-lock,journaling"}, false, "layering,exclusive-lock,journaling", ""},
		{"journaling with fuse", map[string]string{"mounter": "fuse", "imageFeatures": "layering,exclusive-lock,journaling"}, false, "layering,exclusive-lock,journaling", ""},
		{"lock option, default", map[string]string{"mapOptions": "krbd:lock_on_read"}, false, "layering,exclusive-lock,object-map,fast-diff,deep-flatten", ""},
		{"lock option, several writers", map[string]string{"mapOptions": "exclusive"}, true, "", "several nodes write gets layering,deep-flatten"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := map[string]string{"clusterID": "c1", "pool": "rbd"}
			for k, v := range c.params {
				in[k] = v
			}
			p, err := ParseParams(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.VolumeFeatures(c.multiWriter)
			switch {
			case c.want == "" && err == nil:
				t.Fatalf("accepted: %v", got)
			case c.want == "" && !strings.Contains(err.Error(), c.because):
				t.Fatalf("error %q does not say %q", err, c.because)
			case c.want != "" && (err != nil || strings.Join(got, ",") != c.want):
				t.Fatalf("VolumeFeatures = %v, %v; want %s", got, err, c.want)
			}
		})
	}
	// The defaults are not handed out for callers to change.
	p, _ := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd"})
	f, _ := p.VolumeFeatures(false)
	f[0] = "changed"
	if SingleWriterFeatures[0] != "layering" {
		t.Fatal("VolumeFeatures returned the default list itself")
	}
}

func TestJournalingRefusedForKernelMapsSaysWhy(t *testing.T) {
	_, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering,exclusive-lock,journaling"})
	if err == nil || !strings.Contains(err.Error(), "krbd") || !strings.Contains(err.Error(), "set mounter to nbd or fuse") {
		t.Fatalf("error %v does not say what to set", err)
	}
}

func TestParseParams(t *testing.T) {
	p, err := ParseParams(map[string]string{
		"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering,exclusive-lock,object-map,fast-diff",
		"csi.storage.k8s.io/fstype": "xfs", "mounter": "fuse", "mapOptions": "lock_on_read,queue_depth=128",
		"mkfsOptions": "-K -l size=64m", "csi.storage.k8s.io/pvc/name": "data",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.FsType != "xfs" || len(p.ImageFeatures) != 4 || len(p.MkfsOptions) != 3 {
		t.Fatalf("got %+v", p)
	}
	if ctx := p.VolumeContext(); ctx["mounter"] != "fuse" || ctx["clusterID"] != "c1" {
		t.Fatalf("volume context %+v", ctx)
	}
	d, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd"})
	if err != nil || d.ImageFeatures != nil {
		t.Fatalf("no imageFeatures: %+v, %v; want none chosen yet", d, err)
	}
	for name, in := range map[string]map[string]string{
		"no cluster":     {"pool": "rbd"},
		"no pool":        {"clusterID": "c1"},
		"bad pool":       {"clusterID": "c1", "pool": "a/b"},
		"unknown param":  {"clusterID": "c1", "pool": "rbd", "imagefeatures": "layering"},
		"journaling":     {"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering,exclusive-lock,journaling"},
		"krbd journal":   {"clusterID": "c1", "pool": "rbd", "mounter": "krbd", "imageFeatures": "layering,exclusive-lock,journaling"},
		"unknown feat":   {"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering,striping"},
		"no layering":    {"clusterID": "c1", "pool": "rbd", "imageFeatures": "exclusive-lock,object-map"},
		"journal alone":  {"clusterID": "c1", "pool": "rbd", "mounter": "nbd", "imageFeatures": "layering,journaling"},
		"lock option":    {"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering", "mapOptions": "exclusive"},
		"missing dep":    {"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering,fast-diff"},
		"bad fs":         {"clusterID": "c1", "pool": "rbd", "csi.storage.k8s.io/fstype": "ntfs"},
		"bad mounter":    {"clusterID": "c1", "pool": "rbd", "mounter": "rbd-nbd"},
		"smuggle option": {"clusterID": "c1", "pool": "rbd", "mapOptions": "ro --id admin"},
		"dash option":    {"clusterID": "c1", "pool": "rbd", "mapOptions": "-o,x"},
		"shell mkfs":     {"clusterID": "c1", "pool": "rbd", "mkfsOptions": "-m0 $(reboot)"},
		"long cluster":   {"clusterID": strings.Repeat("c", 41), "pool": "rbd"},
		"static class":   {"clusterID": "c1", "pool": "rbd", "staticVolume": "true"},
		"created empty":  {"clusterID": "c1", "pool": "rbd", "createdEmpty": "false"},
		"long pvc name":  {"clusterID": "c1", "pool": "rbd", "csi.storage.k8s.io/pvc/name": strings.Repeat("n", 254)},
	} {
		if _, err := ParseParams(in); err == nil {
			t.Errorf("%s: accepted %v", name, in)
		}
	}
}

// staticVolume belongs to a PV's volumeAttributes: "true" or "false", and
// the rest of the attributes are held to the StorageClass's rules.
func TestStaticVolumeContext(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "false": false, "": false} {
		p, err := ParseVolumeContext(map[string]string{"clusterID": "c1", "pool": "rbd", "staticVolume": v})
		if err != nil || p.Static != want {
			t.Errorf("staticVolume %q: static %v, %v; want %v", v, p.Static, err, want)
		}
	}
	for name, in := range map[string]map[string]string{
		"not a boolean": {"clusterID": "c1", "pool": "rbd", "staticVolume": "yes"},
		"no pool":       {"clusterID": "c1", "staticVolume": "true"},
		"bad mounter":   {"clusterID": "c1", "pool": "rbd", "staticVolume": "true", "mounter": "rbd-nbd"},
	} {
		if _, err := ParseVolumeContext(in); err == nil {
			t.Errorf("%s: accepted %v", name, in)
		}
	}
}

// createdEmpty comes back from CreateVolume's context, and only there.
func TestCreatedEmptyContext(t *testing.T) {
	p, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.VolumeContext()[ParamCreatedEmpty]; ok {
		t.Errorf("a volume not created yet says createdEmpty: %v", p.VolumeContext())
	}
	p.CreatedEmpty = true
	back, err := ParseVolumeContext(p.VolumeContext())
	if err != nil || !back.CreatedEmpty || back.Static {
		t.Errorf("createdEmpty did not survive its context: %+v %v", back, err)
	}
	if _, err := ParseVolumeContext(map[string]string{"clusterID": "c1", "pool": "rbd", "createdEmpty": "yes"}); err == nil {
		t.Error("createdEmpty \"yes\" accepted")
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

func TestVolumeNamePrefix(t *testing.T) {
	for _, ok := range []string{"k8s-prod-", "a1-", "team.x-", "csi-vol-", strings.Repeat("a", 23) + "-"} {
		if err := ValidVolumeNamePrefix(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "x", "-", "K8s-", "k8s", "-a-", "1a-", "k8s_prod-", "k8s prod-", "csi-del-", "csi-snap-x-", "csi-", "rbdcsi.x-", strings.Repeat("a", 24) + "-"} {
		if err := ValidVolumeNamePrefix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd", "volumeNamePrefix": "Prod"}); err == nil {
		t.Error("a StorageClass with a bad volumeNamePrefix was accepted")
	}
}
