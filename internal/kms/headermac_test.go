package kms

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"strings"
	"testing"
)

func TestHeaderMACBindsTheHeaderToTheDEK(t *testing.T) {
	dek, _ := NewDEK()
	digest := sha256.Sum256([]byte("a header"))
	mac, err := NewHeaderMAC(dek, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(mac), "v1.") || len(mac) != len("v1.")+43 {
		t.Fatalf("header MAC %q: want v1. and 32 bytes in base64url", mac)
	}
	if again, _ := NewHeaderMAC(dek, digest[:]); again != mac {
		t.Error("the same header and key give another MAC")
	}
	if !mac.Verify(dek, digest[:]) {
		t.Fatal("the MAC does not verify its own header and key")
	}
	other := sha256.Sum256([]byte("another header"))
	otherDEK, _ := NewDEK()
	for name, c := range map[string]struct {
		mac         HeaderMAC
		dek, digest []byte
	}{
		"another header":    {mac, dek, other[:]},
		"another key":       {mac, otherDEK, digest[:]},
		"another version":   {"v2" + mac[2:], dek, digest[:]},
		"cut short":         {mac[:len(mac)-1], dek, digest[:]},
		"empty":             {"", dek, digest[:]},
		"a key too short":   {mac, dek[:16], digest[:]},
		"padding appended":  {mac + "=", dek, digest[:]},
		"wrapped DEK alone": {HeaderMAC(strings.Repeat("A", 46)), dek, digest[:]},
	} {
		if c.mac.Verify(c.dek, c.digest) {
			t.Errorf("%s: verifies", name)
		}
	}
	// The MAC key is derived from the DEK for this use alone: an HMAC under
	// the bare DEK is another value.
	bare := hmac.New(sha256.New, dek)
	bare.Write(digest[:])
	if sum, _ := mac.decode(); bytes.Equal(sum, bare.Sum(nil)) {
		t.Error("the MAC is keyed with the DEK itself")
	}
}
