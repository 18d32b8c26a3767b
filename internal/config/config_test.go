package config

import (
	"strings"
	"testing"
)

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
	if SingleWriterFeatures()[0] != "layering" {
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
