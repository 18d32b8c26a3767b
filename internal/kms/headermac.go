package kms

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// A volume's LUKS2 header is checked for its shape at every stage, which
// anyone with write access to the pool could still imitate in the details
// (a sector size, the keyslot area's place). The node therefore binds the
// header it wrote to the volume's DEK: HMAC-SHA256 over the header's
// canonical digest (luks.Header.Digest), under a key derived from the DEK,
// kept in the key record (MetaHeader). Only a holder of the DEK can make
// one that verifies; a clone, which shares its parent's DEK and header,
// records its own at its first stage.

// headerMACVersion starts every header MAC; headerMACInfo is the HKDF info
// string that keeps its key apart from any other use of the DEK.
const (
	headerMACVersion = "v1"
	headerMACInfo    = "rbdcsi LUKS2 header binding v1"
	headerMACSize    = sha256.Size
)

// HeaderMAC is a header's binding as stored: v1.<HMAC, base64url without
// padding>.
type HeaderMAC string

// NewHeaderMAC binds the header digest to dek.
func NewHeaderMAC(dek, digest []byte) (HeaderMAC, error) {
	sum, err := headerMAC(dek, digest)
	if err != nil {
		return "", err
	}
	return HeaderMAC(headerMACVersion + "." + base64.RawURLEncoding.EncodeToString(sum)), nil
}

// Verify reports whether m binds digest to dek, comparing in constant
// time. A malformed m does not verify.
func (m HeaderMAC) Verify(dek, digest []byte) bool {
	stored, err := m.decode()
	if err != nil {
		return false
	}
	sum, err := headerMAC(dek, digest)
	return err == nil && hmac.Equal(stored, sum)
}

func headerMAC(dek, digest []byte) ([]byte, error) {
	if len(dek) < DEKSize {
		return nil, fmt.Errorf("a data key has %d bytes, not %d", len(dek), DEKSize)
	}
	key, err := hkdf.Key(sha256.New, dek, nil, headerMACInfo, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("deriving the header binding key: %w", err)
	}
	defer clear(key)
	h := hmac.New(sha256.New, key)
	h.Write(digest)
	return h.Sum(nil), nil
}

// decode is m's HMAC; the error says what is wrong with its form only.
func (m HeaderMAC) decode() ([]byte, error) {
	version, enc, ok := strings.Cut(string(m), ".")
	if !ok || version != headerMACVersion {
		return nil, fmt.Errorf("header MAC of version %.10q, not %s", version, headerMACVersion)
	}
	sum, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(sum) != headerMACSize {
		return nil, fmt.Errorf("header MAC is not %d bytes in base64url", headerMACSize)
	}
	return sum, nil
}
