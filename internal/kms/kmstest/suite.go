// Package kmstest is the behaviour every KMS provider (kms.Keys) owes its
// callers, as one suite each provider runs: the secret provider against
// KEKs in a map, KMIP against a real KMIP server.
package kmstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// Provider is a KMS under test.
type Provider struct {
	// KMSID is the ID the KMS is opened as.
	KMSID string
	// NewKEK makes a KEK and returns its ID.
	NewKEK func(t *testing.T) string
	// Open opens the KMS with KEK current as the one new wraps use; every
	// KEK NewKEK made still unwraps.
	Open func(t *testing.T, current string) kms.Keys
	// Secrets are the values no error may show: key material, PEM.
	Secrets func() []string
}

// Run runs the suite against p.
func Run(t *testing.T, p Provider) {
	s := &suite{p: p}
	t.Run("RoundTrip", s.roundTrip)
	t.Run("BoundToItsImage", s.bound)
	t.Run("RefusesTampering", s.tampering)
	t.Run("Rotation", s.rotation)
}

type suite struct{ p Provider }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// binding is the image the suite's DEKs belong to.
func (s *suite) binding() kms.Binding {
	return kms.Binding{KMSID: s.p.KMSID, Pool: "rbd", Namespace: "ns", Image: "csi-vol-1"}
}

// failed checks that an operation that should fail did, gave no key, and
// says nothing secret (dek is the data key in play, if any).
func (s *suite) failed(t *testing.T, what string, got []byte, err error, dek []byte) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error (got %x)", what, got)
		return
	}
	if got != nil {
		t.Errorf("%s: %v, and a key was returned", what, err)
	}
	NoSecrets(t, err, s.p.Secrets(), dek)
}

// NoSecrets fails t if err's text holds any of secrets (any run of 16
// characters of one, so a line of a PEM block counts) or dek, raw, in hex
// or in base64.
func NoSecrets(t testing.TB, err error, secrets []string, dek []byte) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	var needles []string
	for _, sec := range secrets {
		for _, field := range strings.Fields(sec) {
			if strings.HasPrefix(field, "-----") || strings.HasSuffix(field, "-----") {
				continue // a PEM armour line: no secret
			}
			for i := 0; i+16 <= len(field); i += 8 {
				needles = append(needles, field[i:i+16])
			}
		}
	}
	if len(dek) > 0 {
		needles = append(needles, string(dek), hex.EncodeToString(dek),
			base64.StdEncoding.EncodeToString(dek)[:40], base64.RawURLEncoding.EncodeToString(dek)[:40])
	}
	for _, n := range needles {
		if strings.Contains(msg, n) {
			t.Errorf("an error shows secret material: %v", err)
			return
		}
	}
}

func (s *suite) roundTrip(t *testing.T) {
	k1 := s.p.NewKEK(t)
	keys := s.p.Open(t, k1)
	if keys.Current() != k1 {
		t.Fatalf("Current() = %q, want %q", keys.Current(), k1)
	}
	dek, err := kms.NewDEK()
	if err != nil {
		t.Fatal(err)
	}
	w, err := keys.Wrap(ctx(t), dek, s.binding())
	if err != nil {
		t.Fatalf("Wrap: %v", err)
	}
	if w.KEKID() != k1 || !w.Bound() {
		t.Errorf("wrapped %q: KEKID %q, Bound %v; want %q, true", w, w.KEKID(), w.Bound(), k1)
	}
	if strings.Contains(string(w), base64.RawURLEncoding.EncodeToString(dek)[:20]) {
		t.Errorf("the wrapped key %q shows the data key", w)
	}
	got, err := keys.Unwrap(ctx(t), w, s.binding())
	if err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("Unwrap = %x, %v; want %x", got, err, dek)
	}
	// A fresh nonce per wrap: one DEK never wraps the same twice.
	if w2, err := keys.Wrap(ctx(t), dek, s.binding()); err != nil || w2 == w {
		t.Errorf("a second wrap: %q, %v (first %q)", w2, err, w)
	}
	_, err = keys.Wrap(ctx(t), dek[:16], s.binding())
	s.failed(t, "wrapping a short data key", nil, err, dek)
	other := s.binding()
	other.KMSID = s.p.KMSID + "-other"
	_, err = keys.Wrap(ctx(t), dek, other)
	s.failed(t, "wrapping for another KMS", nil, err, dek)
	for _, b := range []kms.Binding{{KMSID: s.p.KMSID, Image: "i"}, {KMSID: s.p.KMSID, Pool: "p"}} {
		_, err = keys.Wrap(ctx(t), dek, b)
		s.failed(t, "wrapping with binding "+b.String(), nil, err, dek)
	}
}

// A wrapped DEK opens only for the image it was made for: another image,
// pool, namespace or a shifted one fails as a wrong key; another KMS is
// refused.
func (s *suite) bound(t *testing.T) {
	k := s.p.NewKEK(t)
	keys := s.p.Open(t, k)
	dek, _ := kms.NewDEK()
	w, err := keys.Wrap(ctx(t), dek, s.binding())
	if err != nil {
		t.Fatal(err)
	}
	for what, change := range map[string]func(*kms.Binding){
		"image":     func(b *kms.Binding) { b.Image = "csi-vol-2" },
		"pool":      func(b *kms.Binding) { b.Pool = "rbd2" },
		"namespace": func(b *kms.Binding) { b.Namespace = "" },
		"shifted":   func(b *kms.Binding) { b.Pool, b.Namespace = "rbdn", "s" },
	} {
		b := s.binding()
		change(&b)
		got, err := keys.Unwrap(ctx(t), w, b)
		if !errors.Is(err, kms.ErrWrongKEK) {
			t.Errorf("another %s (%s): %x, %v; want ErrWrongKEK", what, b, got, err)
		}
		s.failed(t, "another "+what, got, err, dek)
	}
	b := s.binding()
	b.KMSID += "-other"
	got, err := keys.Unwrap(ctx(t), w, b)
	s.failed(t, "another KMS", got, err, dek)
}

// Any change to a wrapped DEK is refused, never opened to another key: each
// field, the KEK ID swapped for another KEK's (its ID is bound too), or for
// one the KMS lacks (ErrMissingKEK), and strings that are no wrap at all.
func (s *suite) tampering(t *testing.T) {
	k1, k2 := s.p.NewKEK(t), s.p.NewKEK(t)
	keys := s.p.Open(t, k1)
	dek, _ := kms.NewDEK()
	w, err := keys.Wrap(ctx(t), dek, s.binding())
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(w), ".")
	if len(parts) != 5 {
		t.Fatalf("wrapped %q: want 5 fields", w)
	}
	for i := 2; i < 5; i++ {
		p := append([]string{}, parts...)
		b := []byte(p[i])
		if m := len(b) / 2; b[m] == 'A' {
			b[m] = 'B'
		} else {
			b[m] = 'A'
		}
		p[i] = string(b)
		got, err := keys.Unwrap(ctx(t), kms.Wrapped(strings.Join(p, ".")), s.binding())
		s.failed(t, fmt.Sprintf("field %d changed", i), got, err, dek)
	}
	swapped := append([]string{}, parts...)
	swapped[1] = k2
	got, err := keys.Unwrap(ctx(t), kms.Wrapped(strings.Join(swapped, ".")), s.binding())
	if !errors.Is(err, kms.ErrWrongKEK) {
		t.Errorf("KEK ID swapped for another KEK's: %x, %v; want ErrWrongKEK", got, err)
	}
	s.failed(t, "KEK ID swapped", got, err, dek)
	swapped[1] = "no-such-kek"
	got, err = keys.Unwrap(ctx(t), kms.Wrapped(strings.Join(swapped, ".")), s.binding())
	if !errors.Is(err, kms.ErrMissingKEK) {
		t.Errorf("KEK ID of a KEK the KMS lacks: %x, %v; want ErrMissingKEK", got, err)
	}
	s.failed(t, "unknown KEK ID", got, err, dek)
	for _, bad := range []string{"", "x", string(w) + ".", strings.Join(parts[:4], "."), "v9." + strings.Join(parts[1:], "."), parts[0] + ".a!." + strings.Join(parts[2:], ".")} {
		got, err := keys.Unwrap(ctx(t), kms.Wrapped(bad), s.binding())
		s.failed(t, "Unwrap("+bad+")", got, err, dek)
	}
}

// A KEK rotation: DEKs wrapped by the old KEK still open once another is
// current, and re-wrap under it; both wraps open while both KEKs exist,
// whichever is current.
func (s *suite) rotation(t *testing.T) {
	k1 := s.p.NewKEK(t)
	old := s.p.Open(t, k1)
	dek, _ := kms.NewDEK()
	w1, err := old.Wrap(ctx(t), dek, s.binding())
	if err != nil {
		t.Fatal(err)
	}
	k2 := s.p.NewKEK(t)
	rotated := s.p.Open(t, k2)
	if rotated.Current() != k2 {
		t.Fatalf("Current() = %q after the rotation, want %q", rotated.Current(), k2)
	}
	got, err := rotated.Unwrap(ctx(t), w1, s.binding())
	if err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("the old wrap under the rotated KMS: %x, %v", got, err)
	}
	w2, err := rotated.Wrap(ctx(t), got, s.binding())
	if err != nil || w2.KEKID() != k2 {
		t.Fatalf("re-wrap = %q, %v; want one by %q", w2, err, k2)
	}
	// Opened with the old KEK current (a plugin that has not seen the
	// rotation yet), the KMS opens the new wrap too.
	for name, keys := range map[string]kms.Keys{"rotated": rotated, "not yet rotated": s.p.Open(t, k1)} {
		got, err := keys.Unwrap(ctx(t), w2, s.binding())
		if err != nil || !bytes.Equal(got, dek) {
			t.Errorf("the new wrap under the %s KMS: %x, %v", name, got, err)
		}
	}
}
