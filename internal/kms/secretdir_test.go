package kms

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Secret as the kubelet mounts it: keys are symlinks into a timestamped
// directory through ..data.
func TestSecretsFromDir(t *testing.T) {
	dir := t.TempDir()
	stamp := filepath.Join(dir, "..2026_11_26_03_00_00.1")
	if err := os.Mkdir(stamp, 0o700); err != nil {
		t.Fatal(err)
	}
	kek := b64(testKEK(3))
	files := map[string]string{"userID": "csi\n", "userKey": "AQAA==", "encryptionKEK.k1": kek + "\n", "encryptionKEKCurrent": "k1"}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(stamp, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(stamp), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := SecretsFromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got["userID"] != "csi" || got["encryptionKEK.k1"] != kek || got["encryptionKEKCurrent"] != "k1" {
		t.Fatalf("SecretsFromDir = %d keys: %v", len(got), got["userID"])
	}
	keys, err := Config{"t": {Type: TypeSecret}}.Open("t", WithoutCredentials(got))
	if err != nil || keys.Current() != "k1" {
		t.Fatalf("Open = %v, %v", keys, err)
	}

	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", maxSecretFileBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SecretsFromDir(dir); err == nil {
		t.Error("an oversized file was read")
	}
	if _, err := SecretsFromDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory was read")
	}
}
