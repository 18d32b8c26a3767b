package kms

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"tenant-a": {"type": "secret"}, "tenant-b": {"type": "secret", "keyPrefix": "kekB"}}`))
	if err != nil || len(c) != 2 || c["tenant-b"].KeyPrefix != "kekB" {
		t.Fatalf("ParseConfig = %+v, %v", c, err)
	}
	for _, bad := range []string{
		`{"a": {"type": "vault"}}`,
		`{"a": {"type": "secret", "keyprefix": "x"}}`,
		`{"a b": {"type": "secret"}}`,
		`{"a": {"type": "secret", "keyPrefix": "x.y"}}`,
		`[]`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted it", bad)
		}
	}
}

// The secret KMS: one KEK needs no Current; several need it; a DEK wrapped
// by the old KEK still opens while the secret holds it (rotation), and
// errors name keys, never key material.
func TestSecretKeys(t *testing.T) {
	c := Config{"t": {Type: TypeSecret}}
	ctx := context.Background()
	oldKEK, newKEK := testKEK(1), testKEK(2)
	one := map[string]string{"userID": "u", "userKey": "k", "encryptionKEK.old": b64(oldKEK)}
	keys, err := c.Open("t", one)
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
	got, err := rotated.Unwrap(ctx, w, testBinding)
	if err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("old DEK under the rotated keys: %x, %v", got, err)
	}
	rewrapped, err := rotated.Wrap(ctx, got, testBinding)
	if err != nil || rewrapped.KEKID() != "new" {
		t.Fatalf("re-wrap = %q, %v", rewrapped, err)
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
