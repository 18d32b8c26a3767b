package kms

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"strings"
	"testing"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"tenant-a": {"type": "secret"}, "tenant-b": {"type": "secret", "keyPrefix": "kekB"}}`))
	if err != nil || len(c) != 2 || c["tenant-b"].KeyPrefix != "kekB" {
		t.Fatalf("ParseConfig = %+v, %v", c, err)
	}
	c, err = ParseConfig([]byte(`{"k": {"type": "kmip", "endpoint": "kms.example:5696", "keyID": "12", "tlsServerName": "kms", "secretPrefix": "kmipB"}}`))
	if err != nil || c["k"].KeyID != "12" || c["k"].Endpoint != "kms.example:5696" || c["k"].SecretPrefix != "kmipB" || c["k"].TLSServerName != "kms" {
		t.Fatalf("ParseConfig(kmip) = %+v, %v", c, err)
	}
	for _, bad := range []string{
		`{"a": {"type": "vault"}}`,
		`{"a": {"keyPrefix": "x"}}`,
		`{"a": {"type": "secret", "keyprefix": "x"}}`,
		`{"a b": {"type": "secret"}}`,
		`{"a": {"type": "secret", "keyPrefix": "x.y"}}`,
		`[]`,
		// Fields are known per type.
		`{"a": {"type": "secret", "endpoint": "kms:5696"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696", "keyID": "1", "keyPrefix": "x"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696", "keyId": "1"}}`,
		// kmip needs an endpoint and a key ID, both well formed.
		`{"a": {"type": "kmip", "keyID": "1"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696"}}`,
		`{"a": {"type": "kmip", "endpoint": "https://kms:5696", "keyID": "1"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:0", "keyID": "1"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696", "keyID": "1.2"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696", "keyID": "1", "secretPrefix": "a.b"}}`,
		`{"a": {"type": "kmip", "endpoint": "kms:5696", "keyID": "1", "tlsServerName": "a b"}}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted it", bad)
		}
	}
}

// The secret KMS's own rules (the behaviour every KMS owes is the shared
// suite's, kmstest): one KEK needs no Current; several need it; a DEK
// wrapped by a KEK the secret lacks names the key wanted, and errors name
// keys, never key material.
func TestSecretKeys(t *testing.T) {
	c := Config{"t": {Type: TypeSecret}}
	ctx := context.Background()
	oldKEK, newKEK := testKEK(1), testKEK(2)
	one := map[string]string{"userID": "u", "userKey": "k", "encryptionKEK.old": b64(oldKEK)}
	if _, err := c.Open("t", one); !errors.Is(err, ErrKeysWithCredentials) {
		t.Errorf("a KEK beside a Ceph key: %v, want ErrKeysWithCredentials", err)
	}
	keys, err := c.Open("t", WithoutCredentials(one))
	if err != nil || keys.Current() != "old" {
		t.Fatalf("Open = %v, %v", keys, err)
	}
	dek, _ := NewDEK()
	w, err := keys.Wrap(ctx, dek, testBinding)
	if err != nil || w.KEKID() != "old" {
		t.Fatalf("Wrap = %q, %v", w, err)
	}

	two := map[string]string{"encryptionKEK.old": b64(oldKEK), "encryptionKEK.new": b64(newKEK)}
	if _, err := c.Open("t", two); err == nil || !strings.Contains(err.Error(), "encryptionKEKCurrent") {
		t.Errorf("two keys and no Current: %v", err)
	}
	two["encryptionKEKCurrent"] = "new"
	rotated, err := c.Open("t", two)
	if err != nil || rotated.Current() != "new" {
		t.Fatalf("Open with Current = %v, %v", rotated, err)
	}

	onlyNew := map[string]string{"encryptionKEK.new": b64(newKEK)}
	keys, _ = c.Open("t", onlyNew)
	_, err = keys.Unwrap(ctx, w, testBinding)
	if !errors.Is(err, ErrMissingKEK) || !strings.Contains(err.Error(), "encryptionKEK.old") {
		t.Errorf("unwrap without the old key: %v", err)
	}
	wrong := map[string]string{"encryptionKEK.old": b64(newKEK)}
	keys, _ = c.Open("t", wrong)
	if _, err := keys.Unwrap(ctx, w, testBinding); !errors.Is(err, ErrWrongKEK) {
		t.Errorf("unwrap with another key under the same ID: %v", err)
	}
	if _, err := c.Open("nope", one); !errors.Is(err, ErrUnknownKMS) || !strings.Contains(err.Error(), "configured: t") {
		t.Errorf("unknown KMS: %v", err)
	}
	none, err := c.Open("t", map[string]string{"userID": "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Wrap(ctx, dek, testBinding); !errors.Is(err, ErrMissingKEK) {
		t.Errorf("wrap with no key: %v", err)
	}
	for _, bad := range []map[string]string{
		{"encryptionKEK.a": "not base64!"},
		{"encryptionKEK.a": b64(make([]byte, 16))},
		{"encryptionKEK.a": b64(oldKEK), "encryptionKEKCurrent": "b"},
	} {
		_, err := c.Open("t", bad)
		if err == nil {
			t.Errorf("Open(%v) accepted it", bad)
			continue
		}
		for _, v := range bad {
			if len(v) > 8 && strings.Contains(err.Error(), v) {
				t.Errorf("error shows a secret value: %v", err)
			}
		}
	}
}

// Key material beside a Ceph key is refused for either type; a Secret
// with a Ceph key and nothing of the KMS's, or the KMS's keys alone, is
// not (the call's Ceph user is then the secret's, or the plugin's own).
func TestKeysApartFromCredentials(t *testing.T) {
	c := Config{
		"s":  {Type: TypeSecret, KeyPrefix: "tenantA"},
		"km": {Type: TypeKMIP, Endpoint: "kms:5696", KeyID: "1"},
	}
	ceph := map[string]string{"userID": "u", "userKey": "AQAA=="}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(ceph)
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for name, tc := range map[string]struct {
		id      string
		secrets map[string]string
		refused bool
	}{
		"KEK beside the Ceph key":               {"s", with("tenantA.k1", b64(testKEK(1))), true},
		"another KMS's KEK beside the Ceph key": {"s", with("encryptionKEK.k1", b64(testKEK(1))), false},
		"KMIP client key beside the Ceph key":   {"km", with("kmipClientKey", "PEM"), true},
		"KMIP CA only beside the Ceph key":      {"km", with("kmipCA", "PEM"), false},
		"KEKs alone":                            {"s", WithoutCredentials(with("tenantA.k1", b64(testKEK(1)))), false},
	} {
		_, err := c.Open(tc.id, tc.secrets)
		if got := errors.Is(err, ErrKeysWithCredentials); got != tc.refused {
			t.Errorf("%s: Open = %v, refused %v, want %v", name, err, got, tc.refused)
		}
		if err != nil && strings.Contains(err.Error(), "AQAA") {
			t.Errorf("%s: the error shows the key", name)
		}
	}
	if got := WithoutCredentials(with("tenantA.k1", "x")); len(got) != 1 || got["tenantA.k1"] != "x" {
		t.Errorf("WithoutCredentials = %d keys", len(got))
	}
}
