// Package kms keeps the data encryption keys (DEKs) of encrypted volumes
// wrapped by key encryption keys (KEKs) the admin controls, and reads the
// KMS configuration that says where each StorageClass's KEKs come from.
//
// A DEK is 32 random bytes made at CreateVolume; it is stored only wrapped,
// in the image's metadata. Wrapping is AES-256-GCM under a key derived
// (HKDF-SHA256) from the KEK with a salt drawn for that one wrap, and the
// wrapped form names its KEK, so rotating KEKs re-wraps DEKs without
// touching a volume's data or its LUKS header.
package kms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DEKSize is the length of a data encryption key: the LUKS2 volume key
// material cryptsetup reads as a passphrase.
const DEKSize = 32

// MinKEKSize is the least key material a KEK may have.
const MinKEKSize = 32

// wrapVersion starts every wrapped DEK; Unwrap refuses one it does not know.
const wrapVersion = "v1"

// saltSize and the HKDF info string make each wrap's key unique to it.
const (
	saltSize = 32
	hkdfInfo = "rbdcsi DEK wrap v1"
)

// ErrWrongKEK: the KEK does not open the wrapped DEK (another key under
// the same ID, or the wrapped DEK was altered).
var ErrWrongKEK = errors.New("the key encryption key does not unwrap this data key")

var kekIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidKEKID checks a KEK identifier: it is stored beside every DEK it
// wraps, so it is short and plain.
func ValidKEKID(id string) error {
	if !kekIDPattern.MatchString(id) {
		return fmt.Errorf("key ID %.70q: want 1 to 64 letters, digits, '_' or '-'", id)
	}
	return nil
}

// NewDEK draws a data encryption key.
func NewDEK() ([]byte, error) {
	dek := make([]byte, DEKSize)
	if _, err := rand.Read(dek); err != nil {
		return nil, fmt.Errorf("drawing a data key: %w", err)
	}
	return dek, nil
}

// Wrapped is a DEK as stored: v1.<kekID>.<salt>.<nonce>.<sealed>, the last
// three base64url without padding. The version and the KEK ID are bound to
// the sealed DEK as additional data: neither can be swapped unnoticed.
type Wrapped string

// KEKID is the ID of the KEK that wrapped w, or "" if w is malformed.
func (w Wrapped) KEKID() string {
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 || parts[0] != wrapVersion {
		return ""
	}
	return parts[1]
}

// Wrap seals dek under the KEK identified by kekID.
func Wrap(kekID string, kek, dek []byte) (Wrapped, error) {
	if err := ValidKEKID(kekID); err != nil {
		return "", err
	}
	if len(kek) < MinKEKSize {
		return "", fmt.Errorf("key %s has %d bytes, fewer than %d", kekID, len(kek), MinKEKSize)
	}
	if len(dek) != DEKSize {
		return "", fmt.Errorf("a data key has %d bytes, not %d", len(dek), DEKSize)
	}
	salt := make([]byte, saltSize)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("drawing a salt: %w", err)
	}
	aead, err := sealer(kek, salt)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("drawing a nonce: %w", err)
	}
	sealed := aead.Seal(nil, nonce, dek, additional(kekID))
	enc := base64.RawURLEncoding.EncodeToString
	return Wrapped(strings.Join([]string{wrapVersion, kekID, enc(salt), enc(nonce), enc(sealed)}, ".")), nil
}

// Unwrap opens w with kek, which must be the KEK w names.
func Unwrap(w Wrapped, kek []byte) ([]byte, error) {
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 {
		return nil, errors.New("malformed wrapped data key")
	}
	if parts[0] != wrapVersion {
		return nil, fmt.Errorf("wrapped data key of version %.10q; this driver reads %s", parts[0], wrapVersion)
	}
	salt, err1 := decodeField(parts[2])
	nonce, err2 := decodeField(parts[3])
	sealed, err3 := decodeField(parts[4])
	if err := errors.Join(err1, err2, err3, ValidKEKID(parts[1])); err != nil || len(salt) != saltSize {
		return nil, errors.New("malformed wrapped data key")
	}
	aead, err := sealer(kek, salt)
	if err != nil {
		return nil, err
	}
	if len(nonce) != aead.NonceSize() {
		return nil, errors.New("malformed wrapped data key")
	}
	dek, err := aead.Open(nil, nonce, sealed, additional(parts[1]))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", parts[1], ErrWrongKEK)
	}
	if len(dek) != DEKSize {
		return nil, errors.New("malformed wrapped data key")
	}
	return dek, nil
}

// decodeField decodes one base64url field of a wrapped key, accepting only
// the spelling Wrap writes: Go's decoder skips CR and LF even in strict
// mode, so without the round trip one key would have many spellings.
func decodeField(s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, err
	}
	if base64.RawURLEncoding.EncodeToString(b) != s {
		return nil, errors.New("not in canonical base64url")
	}
	return b, nil
}

// sealer is AES-256-GCM under HKDF-SHA256(kek, salt).
func sealer(kek, salt []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, kek, salt, hkdfInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func additional(kekID string) []byte { return []byte(wrapVersion + "." + kekID) }
