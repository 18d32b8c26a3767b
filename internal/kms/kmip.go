package kms

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/gemalto/kmip-go/kmip14"

	"github.com/rbdcsi/rbdcsi/internal/kms/kmip"
)

// Type kmip: the KEKs stay in a KMIP server, which wraps and unwraps each
// DEK itself: Encrypt and Decrypt with AES-256-GCM under the KEK, the
// version, the KEK's unique identifier and the Binding as the additional
// data. The KEK never leaves the server and the driver never asks for it
// (no Get), so a node or controller that is broken into can unwrap only
// while it can reach the server with its certificate, and no Secret holds
// key material that opens the volumes. GCM gives the wrap its integrity:
// a record copied to another image, or altered, fails the tag check in
// the server. (Fetching the KEK and wrapping locally would work with any
// server but would put the KEK in every plugin's memory; encrypting the
// DEK in a mode without a tag, as CBC, would let an altered record open
// to garbage that cryptsetup then tries.)
//
// The wrapped form is k1.<key ID>.<nonce>.<ciphertext>.<tag>, the last
// three base64url without padding; the key ID is the server's unique
// identifier of the KEK, so a KEK rotation (the admin creates a key in the
// KMS and changes keyID) re-wraps through the server like any other.
//
// The client's certificate and key, and the CA of the server's
// certificate, are PEM in the call's Secrets under <secretPrefix>CA,
// <secretPrefix>ClientCert and <secretPrefix>ClientKey: the provisioner's
// (CreateVolume wraps), the node-stage one (the node unwraps) and the
// controller's own (rotation), as the KEKs of type secret are.

// DefaultSecretPrefix names the KMIP client's credentials in a Secret
// when the entry says nothing.
const DefaultSecretPrefix = "kmip"

// The Secret keys of the KMIP client's credentials, after the prefix.
const (
	secretCA         = "CA"
	secretClientCert = "ClientCert"
	secretClientKey  = "ClientKey"
)

// GCM's sizes in a k1 wrap.
const (
	kmipNonceSize = kmip.NonceSize
	kmipTagSize   = kmip.TagSize
)

// checkKMIPEntry checks the fields of a type kmip entry.
func checkKMIPEntry(e Entry) error {
	if e.Endpoint == "" {
		return errors.New(`type kmip needs "endpoint": the KMIP server's host:port`)
	}
	if _, _, err := kmip.SplitEndpoint(e.Endpoint); err != nil {
		return err
	}
	if e.KeyID == "" {
		return errors.New(`type kmip needs "keyID": the unique identifier of the KEK new volumes use`)
	}
	if err := ValidKEKID(e.KeyID); err != nil {
		return fmt.Errorf("keyID: %w", err)
	}
	if e.SecretPrefix != "" && !kekIDPattern.MatchString(e.SecretPrefix) {
		return fmt.Errorf("secretPrefix %.70q: want letters, digits, '_' or '-'", e.SecretPrefix)
	}
	if n := e.TLSServerName; n != "" && (len(n) > 253 || strings.ContainsAny(n, " \t\r\n/@:")) {
		return fmt.Errorf("tlsServerName %.70q: want a host name", n)
	}
	return nil
}

// kmipKeys wraps and unwraps through one KMIP server.
type kmipKeys struct {
	kms, current string
	client       *kmip.Client
}

func (e Entry) secretPrefix() string {
	if e.SecretPrefix == "" {
		return DefaultSecretPrefix
	}
	return e.SecretPrefix
}

func openKMIPKeys(kms string, e Entry, secrets map[string]string) (*kmipKeys, error) {
	prefix := e.secretPrefix()
	names := []string{prefix + secretCA, prefix + secretClientCert, prefix + secretClientKey}
	var missing []string
	for _, n := range names {
		if strings.TrimSpace(secrets[n]) == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("KMS %s: the secret lacks %s: the KMIP client's certificate, its key and the server's CA, in PEM", kms, strings.Join(missing, ", "))
	}
	client, err := kmip.New(kmip.Config{
		Endpoint:   e.Endpoint,
		ServerName: e.TLSServerName,
		CA:         []byte(secrets[names[0]]),
		ClientCert: []byte(secrets[names[1]]),
		ClientKey:  []byte(secrets[names[2]]),
	})
	if err != nil {
		return nil, fmt.Errorf("KMS %s: secret keys %s: %w", kms, strings.Join(names, ", "), err)
	}
	return &kmipKeys{kms: kms, current: e.KeyID, client: client}, nil
}

func (k *kmipKeys) Current() string { return k.current }

func (k *kmipKeys) ours(b Binding) error {
	if b.KMSID != k.kms {
		return fmt.Errorf("KMS %s asked to bind a data key to KMS %.70q", k.kms, b.KMSID)
	}
	return b.check()
}

func (k *kmipKeys) Wrap(ctx context.Context, dek []byte, b Binding) (Wrapped, error) {
	if err := k.ours(b); err != nil {
		return "", err
	}
	if len(dek) != DEKSize {
		return "", fmt.Errorf("a data key has %d bytes, not %d", len(dek), DEKSize)
	}
	nonce := make([]byte, kmipNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("drawing a nonce: %w", err)
	}
	ct, tag, err := k.client.Encrypt(ctx, k.current, dek, nonce, additional(kmipVersion, k.current, b))
	if err != nil {
		return "", k.failed(k.current, b, false, err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return Wrapped(strings.Join([]string{kmipVersion, k.current, enc(nonce), enc(ct), enc(tag)}, ".")), nil
}

func (k *kmipKeys) Unwrap(ctx context.Context, w Wrapped, b Binding) ([]byte, error) {
	if err := k.ours(b); err != nil {
		return nil, err
	}
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 {
		return nil, errors.New("malformed wrapped data key")
	}
	switch parts[0] {
	case kmipVersion:
	case wrapVersion, legacyVersion:
		return nil, fmt.Errorf("KMS %s: %w: the data key is wrapped by key %.70q from a secret, and KMS %s is of type kmip (was its type changed?)", k.kms, ErrMissingKEK, parts[1], k.kms)
	default:
		return nil, fmt.Errorf("wrapped data key of version %.10q; KMS %s reads %s", parts[0], k.kms, kmipVersion)
	}
	id := parts[1]
	nonce, err1 := decodeField(parts[2])
	ct, err2 := decodeField(parts[3])
	tag, err3 := decodeField(parts[4])
	if err := errors.Join(err1, err2, err3, ValidKEKID(id)); err != nil || len(nonce) != kmipNonceSize || len(ct) != DEKSize || len(tag) != kmipTagSize {
		return nil, errors.New("malformed wrapped data key")
	}
	dek, err := k.client.Decrypt(ctx, id, ct, nonce, additional(kmipVersion, id, b), tag)
	if err != nil {
		return nil, k.failed(id, b, true, err)
	}
	if len(dek) != DEKSize || allZero(dek) {
		// A server's fault; never hand on a key that is not one.
		clear(dek)
		return nil, fmt.Errorf("KMS %s: key %s: the KMIP server's Decrypt gave no valid data key", k.kms, id)
	}
	return dek, nil
}

// failed tells what a KMIP failure under key id means for the caller.
func (k *kmipKeys) failed(id string, b Binding, unwrap bool, err error) error {
	switch {
	case errors.Is(err, kmip.ErrUnavailable):
		return fmt.Errorf("KMS %s: %w", k.kms, unavailable{err})
	case kmip.HasReason(err, kmip14.ResultReasonItemNotFound, kmip14.ResultReasonPermissionDenied):
		// PyKMIP answers PermissionDenied for a key of another client
		// and for one that is not Active.
		return fmt.Errorf("KMS %s: %w: the KMIP server has no active key %.70q this client may use: %w", k.kms, ErrMissingKEK, id, err)
	case unwrap && kmip.HasReason(err, kmip14.ResultReasonCryptographicFailure, kmip14.ResultReasonGeneralFailure):
		// KMIP has no reason of its own for a tag that does not
		// verify; servers answer one of these.
		return fmt.Errorf("KMS %s: key %s, image %s: %w (%w)", k.kms, id, b, ErrWrongKEK, err)
	}
	op := "wrapping"
	if unwrap {
		op = "unwrapping"
	}
	return fmt.Errorf("KMS %s: %s a data key with key %s: %w", k.kms, op, id, err)
}

// unavailable marks a KMS's error as ErrUnavailable without adding its
// text to the cause's.
type unavailable struct{ error }

func (u unavailable) Is(target error) bool { return target == ErrUnavailable }
func (u unavailable) Unwrap() error        { return u.error }

func allZero(b []byte) bool {
	var acc byte
	for _, c := range b {
		acc |= c
	}
	return acc == 0
}
