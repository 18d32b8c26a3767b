// Package kms keeps the data encryption keys (DEKs) of encrypted volumes
// wrapped by key encryption keys (KEKs) the admin controls, and reads the
// KMS configuration that says where each StorageClass's KEKs come from.
//
// A DEK is 32 random bytes made at CreateVolume; it is stored only wrapped,
// in the image's metadata. Wrapping is AES-256-GCM under a key derived
// (HKDF-SHA256) from the KEK with a salt drawn for that one wrap, and the
// wrapped form names its KEK, so rotating KEKs re-wraps DEKs without
// touching a volume's data or its LUKS header. A wrapped DEK is bound to
// its image (Binding): copied to another image, it does not unwrap.
package kms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
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

// wrapVersion starts every wrapped DEK Wrap makes. legacyVersion is the
// unbound wrap of earlier releases: Unwrap still opens it, and the KEK
// rotation replaces it with a bound one. kmipVersion is a DEK wrapped by
// a KMIP server (kmip.go), which only that KMS opens. Unwrap refuses any
// other version.
const (
	wrapVersion   = "v2"
	legacyVersion = "v1"
	kmipVersion   = "k1"
)

// saltSize and the HKDF info string make each wrap's key unique to it.
const (
	saltSize = 32
	hkdfInfo = "rbdcsi DEK wrap v1"
)

// ErrWrongKEK: the KEK does not open the wrapped DEK for this image:
// another key under the same ID, an altered record, or a record made for
// another image. AES-GCM cannot tell these apart.
var ErrWrongKEK = errors.New("the key encryption key does not unwrap this data key for this image (another key under its ID, an altered key record, or one copied from another image)")

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

// Wrapped is a DEK as stored: v2.<kekID>.<salt>.<nonce>.<sealed>, the last
// three base64url without padding, or k1.<kekID>.<nonce>.<ciphertext>.<tag>
// for a KMIP server's wrap. The version, the KEK ID and the Binding are
// sealed with the DEK as additional data: none can be swapped unnoticed,
// and the binding is not stored, only checked.
type Wrapped string

// KEKID is the ID of the KEK that wrapped w, or "" if w is malformed.
func (w Wrapped) KEKID() string {
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 || (parts[0] != wrapVersion && parts[0] != legacyVersion && parts[0] != kmipVersion) {
		return ""
	}
	return parts[1]
}

// Bound tells a wrap bound to its image from a legacy one, which the KEK
// rotation re-wraps even under the current KEK.
func (w Wrapped) Bound() bool {
	return strings.HasPrefix(string(w), wrapVersion+".") || strings.HasPrefix(string(w), kmipVersion+".")
}

// Binding is what a DEK belongs to: its KMS and the image the volume was
// created as, by pool, RADOS namespace and name. The node stages a volume
// by these (its volume ID names them), so a wrapped DEK copied onto
// another image, or an image renamed onto another volume's name, does not
// unwrap there.
//
// The image's RBD ID and the cluster's fsid are left out on purpose: the
// ID is drawn only once the image exists, after its key record must be
// written, and neither survives RBD mirroring, whose copy on the peer
// cluster keeps the pool, namespace and name. A hidden image (a deleted
// volume kept for its snapshots, a group snapshot's member) keeps the
// binding of the volume it came from.
type Binding struct {
	KMSID, Pool, Namespace, Image string
}

func (b Binding) check() error {
	if b.KMSID == "" || b.Pool == "" || b.Image == "" {
		return fmt.Errorf("a data key must be bound to a KMS, a pool and an image (have %q, %q, %q)", b.KMSID, b.Pool, b.Image)
	}
	return nil
}

// Wrap seals dek under the KEK identified by kekID, bound to b.
func Wrap(kekID string, kek, dek []byte, b Binding) (Wrapped, error) {
	if err := ValidKEKID(kekID); err != nil {
		return "", err
	}
	if err := b.check(); err != nil {
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
	sealed := aead.Seal(nil, nonce, dek, additional(wrapVersion, kekID, b))
	enc := base64.RawURLEncoding.EncodeToString
	return Wrapped(strings.Join([]string{wrapVersion, kekID, enc(salt), enc(nonce), enc(sealed)}, ".")), nil
}

// Unwrap opens w with kek, which must be the KEK w names, for the image
// of b. A legacy (v1) wrap is bound to no image and opens anywhere.
func Unwrap(w Wrapped, kek []byte, b Binding) ([]byte, error) {
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 {
		return nil, errors.New("malformed wrapped data key")
	}
	if parts[0] == kmipVersion {
		return nil, fmt.Errorf("%w: the data key is wrapped by key %.70q of a KMIP server, which only a KMS of type kmip unwraps", ErrMissingKEK, parts[1])
	}
	if parts[0] != wrapVersion && parts[0] != legacyVersion {
		return nil, fmt.Errorf("wrapped data key of version %.10q; this driver reads %s and %s", parts[0], wrapVersion, legacyVersion)
	}
	if err := b.check(); err != nil {
		return nil, err
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
	dek, err := aead.Open(nil, nonce, sealed, additional(parts[0], parts[1], b))
	if err != nil {
		return nil, fmt.Errorf("key %s, image %s: %w", parts[1], b, ErrWrongKEK)
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

// additional is the data sealed with a DEK: the version and KEK ID, and
// for v2 and k1 the binding, each field length-prefixed so that no two bindings
// read alike ("a/b" in pool "p" and "b" in pool "p/a" differ).
func additional(version, kekID string, b Binding) []byte {
	ad := []byte(version + "." + kekID)
	if version == legacyVersion {
		return ad
	}
	for _, f := range []string{b.KMSID, b.Pool, b.Namespace, b.Image} {
		ad = binary.BigEndian.AppendUint32(ad, uint32(len(f)))
		ad = append(ad, f...)
	}
	return ad
}

// String names the image for messages: pool/namespace/image.
func (b Binding) String() string {
	if b.Namespace == "" {
		return b.Pool + "/" + b.Image
	}
	return b.Pool + "/" + b.Namespace + "/" + b.Image
}
