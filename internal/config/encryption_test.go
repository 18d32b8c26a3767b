package config

import (
	"maps"
	"strings"
	"testing"
)

func TestEncryptionParams(t *testing.T) {
	base := map[string]string{ParamClusterID: "c1", ParamPool: "rbd"}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	p, err := ParseParams(with(ParamEncrypted, "true", ParamEncryptionKMSID, "tenant-a", ParamEncryptionAllowDiscards, "true"))
	if err != nil || p.Encryption != (Encryption{Enabled: true, KMSID: "tenant-a", AllowDiscards: true}) {
		t.Fatalf("ParseParams = %+v, %v", p.Encryption, err)
	}
	// The node gets the same back from the volume context.
	back, err := ParseVolumeContext(p.VolumeContext())
	if err != nil || back.Encryption != p.Encryption {
		t.Fatalf("volume context round trip = %+v, %v", back.Encryption, err)
	}
	if p, err := ParseParams(base); err != nil || p.Encryption.Enabled || len(p.VolumeContext()) != 2 {
		t.Fatalf("plain class: %+v, %v, %v", p.Encryption, err, p.VolumeContext())
	}
	for name, c := range map[string]struct {
		in   map[string]string
		want string
	}{
		"no KMS":              {with(ParamEncrypted, "true"), "encryptionKMSID is required"},
		"bad KMS ID":          {with(ParamEncrypted, "true", ParamEncryptionKMSID, "a/b"), "want 1 to 64"},
		"KMS without encrypt": {with(ParamEncryptionKMSID, "x"), "apply only with encrypted"},
		"discards alone":      {with(ParamEncryptionAllowDiscards, "true"), "apply only with encrypted"},
		"not a bool":          {with(ParamEncrypted, "yes"), `"yes" is neither`},
	} {
		if _, err := ParseParams(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}
