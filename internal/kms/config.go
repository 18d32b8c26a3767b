package kms

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The KMS configuration is a JSON object (a ConfigMap's file, --kms-config)
// from KMS ID, which StorageClasses name in encryptionKMSID, to where that
// KMS's KEKs come from:
//
//	{"tenant-a": {"type": "secret", "keyPrefix": "encryptionKEK"}}
//
// Type "secret": the KEKs are keys of the Kubernetes Secret that carries
// the call's Ceph credentials (the StorageClass's provisioner, node-stage
// and controller-expand Secrets, and the controller's own): one key per KEK,
// <keyPrefix>.<kekID>, holding at least 32 bytes of key material in base64,
// and <keyPrefix>Current naming the KEK new wraps use (needed only while
// there are several). Rotating: add the new KEK and point Current at it;
// the controller re-wraps every DEK; remove the old one after.
//
// Type "kmip": the KEKs stay in a KMIP server, which wraps and unwraps
// DEKs itself (kmip.go):
//
//	{"tenant-b": {"type": "kmip", "endpoint": "kms.example:5696", "keyID": "42"}}
//
// keyID names the KEK new wraps use; the client's certificate, key and the
// server's CA come from the call's Secrets, as KEKs of type secret do.

// ErrUnknownKMS: the StorageClass names a KMS ID the configuration lacks.
var ErrUnknownKMS = errors.New("unknown KMS ID")

// ErrMissingKEK: the secrets, or the KMS, lack a KEK the call needs.
var ErrMissingKEK = errors.New("key encryption key not available")

// ErrKeysWithCredentials: the Secret a KMS's keys come from also holds a
// Ceph key. Whoever may read it, and every node that stages a volume with
// it, would hold both the ciphertext's access and the keys to it.
var ErrKeysWithCredentials = errors.New("the Secret holds a Ceph key (userKey) beside the KMS's keys; keep them in Secrets of their own (docs/encryption.md#keys-and-credentials), or start the driver with --allow-keks-with-credentials while you move them")

// ErrUnavailable: the KMS could not be reached or did not answer in time;
// the call may succeed later. Callers answer Unavailable.
var ErrUnavailable = errors.New("the KMS is unavailable")

// KMS types the configuration may name.
const (
	TypeSecret = "secret"
	TypeKMIP   = "kmip"
)

// knownFields are the fields an entry of type typ may have (nil: an
// unknown type).
func knownFields(typ string) []string {
	switch typ {
	case TypeSecret:
		return []string{"type", "keyPrefix"}
	case TypeKMIP:
		return []string{"type", "endpoint", "keyID", "tlsServerName", "secretPrefix"}
	}
	return nil
}

// DefaultKeyPrefix names the KEKs in a Secret when the entry says nothing.
const DefaultKeyPrefix = "encryptionKEK"

// Entry is one KMS of the configuration; which fields apply depends on
// its type (knownFields).
type Entry struct {
	Type string `json:"type"`
	// KeyPrefix (type secret) names the KEKs in the Secrets.
	KeyPrefix string `json:"keyPrefix,omitempty"`
	// Type kmip: the server's host:port, the unique identifier of the
	// KEK new wraps use, the name the server's certificate carries if
	// not the endpoint's host, and the prefix of the Secrets' keys that
	// hold the client's credentials (DefaultSecretPrefix).
	Endpoint      string `json:"endpoint,omitempty"`
	KeyID         string `json:"keyID,omitempty"`
	TLSServerName string `json:"tlsServerName,omitempty"`
	SecretPrefix  string `json:"secretPrefix,omitempty"`
}

// Config maps KMS IDs to their entries.
type Config map[string]Entry

// ParseConfig reads and checks a KMS configuration; unknown fields are
// refused, so a misspelt setting fails at start, not at the first volume.
func ParseConfig(data []byte) (Config, error) {
	// encoding/json matches field names without regard to case; the
	// names are checked as written first.
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("KMS configuration: %w", err)
	}
	for id, fields := range raw {
		var typ string
		if err := json.Unmarshal(fields["type"], &typ); err != nil || knownFields(typ) == nil {
			return nil, fmt.Errorf("KMS configuration: %.70s: type %.30s; this driver knows %q and %q", id, fields["type"], TypeSecret, TypeKMIP)
		}
		known := knownFields(typ)
		for f := range fields {
			if !slices.Contains(known, f) {
				return nil, fmt.Errorf("KMS configuration: %.70s: unknown field %.40q for type %s (known: %s)", id, f, typ, strings.Join(known, ", "))
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("KMS configuration: %w", err)
	}
	for id, e := range c {
		if err := ValidKEKID(id); err != nil {
			return nil, fmt.Errorf("KMS configuration: KMS ID: %w", err)
		}
		switch e.Type {
		case TypeSecret:
			if e.KeyPrefix != "" && !kekIDPattern.MatchString(e.KeyPrefix) {
				return nil, fmt.Errorf("KMS configuration: %s: keyPrefix %.70q: want letters, digits, '_' or '-'", id, e.KeyPrefix)
			}
		case TypeKMIP:
			if err := checkKMIPEntry(e); err != nil {
				return nil, fmt.Errorf("KMS configuration: %s: %w", id, err)
			}
		}
	}
	return c, nil
}

// Keys wraps and unwraps the DEKs of one KMS.
type Keys interface {
	// Current names the KEK Wrap uses; a DEK wrapped by another is due
	// for a re-wrap.
	Current() string
	// Wrap and Unwrap bind the DEK to b (see Binding); b.KMSID is this
	// KMS's ID.
	Wrap(ctx context.Context, dek []byte, b Binding) (Wrapped, error)
	Unwrap(ctx context.Context, w Wrapped, b Binding) ([]byte, error)
}

// Open returns the keys of KMS id: from the call's secrets for type
// secret; for type kmip, a client of its server, with the credentials in
// the secrets (it connects to nothing yet). Errors name the KMS and the
// keys, never key material.
func (c Config) Open(id string, secrets map[string]string) (Keys, error) {
	if err := c.Known(id); err != nil {
		return nil, err
	}
	e := c[id]
	if err := apart(id, e, secrets); err != nil {
		return nil, err
	}
	if e.Type == TypeKMIP {
		return openKMIPKeys(id, e, secrets)
	}
	return openSecretKeys(id, e.keyPrefix(), secrets)
}

func (e Entry) keyPrefix() string {
	if e.KeyPrefix == "" {
		return DefaultKeyPrefix
	}
	return e.KeyPrefix
}

// cephKey is the Secret key of a Ceph user's key (cluster.SecretUserKey).
const cephKey = "userKey"

// apart refuses secrets that hold KMS id's key material (a KEK, a KMIP
// client key) beside a Ceph key: see ErrKeysWithCredentials.
func apart(id string, e Entry, secrets map[string]string) error {
	if secrets[cephKey] == "" {
		return nil
	}
	material := func(k string) bool { return strings.HasPrefix(k, e.keyPrefix()+".") }
	if e.Type == TypeKMIP {
		material = func(k string) bool { return k == e.secretPrefix()+secretClientKey }
	}
	for k := range secrets {
		if material(k) {
			return fmt.Errorf("KMS %s: %w", id, ErrKeysWithCredentials)
		}
	}
	return nil
}

// WithoutCredentials is secrets without the Ceph user: what a caller
// started with --allow-keks-with-credentials hands Open, while the admin
// moves the keys out of the credentials Secret.
func WithoutCredentials(secrets map[string]string) map[string]string {
	out := make(map[string]string, len(secrets))
	for k, v := range secrets {
		if k != cephKey && k != "userID" {
			out[k] = v
		}
	}
	return out
}

// Known is nil when the configuration has KMS id, else an ErrUnknownKMS
// that names the ones it has: a check that opens nothing.
func (c Config) Known(id string) error {
	if _, ok := c[id]; ok {
		return nil
	}
	known := slices.Sorted(maps.Keys(c))
	return fmt.Errorf("%w %.70q (configured: %s)", ErrUnknownKMS, id, strings.Join(known, ", "))
}

// secretKeys are KEKs read from a Secret's keys.
type secretKeys struct {
	kms, prefix, current string
	keks                 map[string][]byte
}

func openSecretKeys(kms, prefix string, secrets map[string]string) (*secretKeys, error) {
	s := &secretKeys{kms: kms, prefix: prefix, keks: map[string][]byte{}}
	for k, v := range secrets {
		id, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		if err := ValidKEKID(id); err != nil {
			return nil, fmt.Errorf("KMS %s: secret key %s: %w", kms, k, err)
		}
		kek, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("KMS %s: secret key %s is not base64", kms, k)
		}
		if len(kek) < MinKEKSize {
			return nil, fmt.Errorf("KMS %s: secret key %s holds %d bytes; a KEK needs at least %d (head -c 32 /dev/urandom | base64)", kms, k, len(kek), MinKEKSize)
		}
		s.keks[id] = kek
	}
	ids := slices.Sorted(maps.Keys(s.keks))
	switch cur := strings.TrimSpace(secrets[prefix+"Current"]); {
	case cur != "":
		if _, ok := s.keks[cur]; !ok {
			return nil, fmt.Errorf("KMS %s: %sCurrent names key %.70q, which the secret lacks (it has: %s)", kms, prefix, cur, strings.Join(ids, ", "))
		}
		s.current = cur
	case len(ids) == 1:
		s.current = ids[0]
	case len(ids) == 0:
		// Unwrapping fails by name below; a call that needs to wrap
		// fails here.
	default:
		return nil, fmt.Errorf("KMS %s: the secret holds keys %s; set %sCurrent to the one new volumes use", kms, strings.Join(ids, ", "), prefix)
	}
	return s, nil
}

func (s *secretKeys) Current() string { return s.current }

func (s *secretKeys) Wrap(_ context.Context, dek []byte, b Binding) (Wrapped, error) {
	if s.current == "" {
		return "", fmt.Errorf("KMS %s: %w: the secret has no %s.<id> key", s.kms, ErrMissingKEK, s.prefix)
	}
	if err := s.ours(b); err != nil {
		return "", err
	}
	return Wrap(s.current, s.keks[s.current], dek, b)
}

// ours refuses a binding to another KMS: a caller's slip that would make
// a DEK no call could unwrap.
func (s *secretKeys) ours(b Binding) error {
	if b.KMSID != s.kms {
		return fmt.Errorf("KMS %s asked to bind a data key to KMS %.70q", s.kms, b.KMSID)
	}
	return nil
}

func (s *secretKeys) Unwrap(_ context.Context, w Wrapped, b Binding) ([]byte, error) {
	if err := s.ours(b); err != nil {
		return nil, err
	}
	id := w.KEKID()
	if strings.HasPrefix(string(w), kmipVersion+".") {
		return nil, fmt.Errorf("KMS %s: %w: the data key is wrapped by key %.70q of a KMIP server, and KMS %s is of type secret (was its type changed?)", s.kms, ErrMissingKEK, id, s.kms)
	}
	kek, ok := s.keks[id]
	if !ok {
		have := slices.Sorted(maps.Keys(s.keks))
		return nil, fmt.Errorf("KMS %s: %w: the data key is wrapped by key %.70q, and the secret has no %s.%s (it has: %s)",
			s.kms, ErrMissingKEK, id, s.prefix, id, strings.Join(have, ", "))
	}
	dek, err := Unwrap(w, kek, b)
	if err != nil {
		return nil, fmt.Errorf("KMS %s: %w", s.kms, err)
	}
	return dek, nil
}
