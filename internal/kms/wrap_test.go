package kms

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func testKEK(b byte) []byte { return bytes.Repeat([]byte{b}, MinKEKSize) }

// testBinding is the image the tests' DEKs belong to.
var testBinding = Binding{KMSID: "t", Pool: "rbd", Namespace: "ns", Image: "csi-vol-1"}

func TestWrapUnwrap(t *testing.T) {
	dek, err := NewDEK()
	if err != nil || len(dek) != DEKSize {
		t.Fatalf("NewDEK: %d bytes, %v", len(dek), err)
	}
	w, err := Wrap("2026-11", testKEK(1), dek, testBinding)
	if err != nil {
		t.Fatal(err)
	}
	if w.KEKID() != "2026-11" || !strings.HasPrefix(string(w), "v2.2026-11.") || !w.Bound() {
		t.Errorf("wrapped %q names key %q", w, w.KEKID())
	}
	got, err := Unwrap(w, testKEK(1), testBinding)
	if err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("Unwrap = %x, %v; want %x", got, err, dek)
	}
	// A fresh salt and nonce per wrap: the same DEK never wraps the same.
	w2, _ := Wrap("2026-11", testKEK(1), dek, testBinding)
	if w2 == w {
		t.Error("two wraps of one DEK are equal")
	}
	if _, err := Unwrap(w, testKEK(2), testBinding); !errors.Is(err, ErrWrongKEK) {
		t.Errorf("another KEK: %v, want ErrWrongKEK", err)
	}
}

// Any change to a wrapped DEK is refused, never turned into another key:
// the sealed bytes, the salt, the nonce, and the KEK ID it names (bound
// as additional data).
func TestUnwrapRefusesTampering(t *testing.T) {
	dek, _ := NewDEK()
	w, err := Wrap("a", testKEK(1), dek, testBinding)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(w), ".")
	flip := func(s string) string {
		b := []byte(s)
		if b[0] == 'A' {
			b[0] = 'B'
		} else {
			b[0] = 'A'
		}
		return string(b)
	}
	for i, what := range []string{"", "key ID", "salt", "nonce", "sealed key"} {
		if i == 0 {
			continue
		}
		p := append([]string{}, parts...)
		if i == 1 {
			p[1] = "b"
		} else {
			p[i] = flip(p[i])
		}
		if got, err := Unwrap(Wrapped(strings.Join(p, ".")), testKEK(1), testBinding); err == nil {
			t.Errorf("changed %s: unwrapped to %x", what, got)
		}
	}
	// A bound wrap relabelled as a legacy one would skip the binding:
	// the version is sealed too.
	downgraded := "v1" + strings.TrimPrefix(string(w), "v2")
	for _, bad := range []string{"", "v1", "v3.a.x.y.z", "v2.a.x.y.z", "v1.a.b.c", "v2.a!.AA.AA.AA", string(w) + ".", downgraded} {
		if _, err := Unwrap(Wrapped(bad), testKEK(1), testBinding); err == nil {
			t.Errorf("Unwrap(%q) succeeded", bad)
		}
	}
}

func TestWrapRefusesWeakInput(t *testing.T) {
	dek, _ := NewDEK()
	for _, c := range []struct {
		name, id string
		kek, dek []byte
	}{
		{"short KEK", "a", make([]byte, MinKEKSize-1), dek},
		{"short DEK", "a", testKEK(1), dek[:16]},
		{"bad ID", "a.b", testKEK(1), dek},
		{"empty ID", "", testKEK(1), dek},
	} {
		if _, err := Wrap(c.id, c.kek, c.dek, testBinding); err == nil {
			t.Errorf("%s: wrapped", c.name)
		}
	}
	for _, b := range []Binding{{Pool: "p", Image: "i"}, {KMSID: "t", Image: "i"}, {KMSID: "t", Pool: "p"}} {
		if _, err := Wrap("a", testKEK(1), dek, b); err == nil {
			t.Errorf("binding %+v: wrapped", b)
		}
	}
}

// A wrapped DEK opens only for the image it was made for: copied to
// another image, pool, namespace or KMS, the same KEK refuses it.
func TestWrapIsBoundToItsImage(t *testing.T) {
	dek, _ := NewDEK()
	w, err := Wrap("k", testKEK(1), dek, testBinding)
	if err != nil {
		t.Fatal(err)
	}
	others := map[string]Binding{}
	for what, change := range map[string]func(*Binding){
		"image":     func(b *Binding) { b.Image = "csi-vol-2" },
		"pool":      func(b *Binding) { b.Pool = "rbd2" },
		"namespace": func(b *Binding) { b.Namespace = "" },
		"KMS":       func(b *Binding) { b.KMSID = "u" },
		// Fields that run together must not read alike.
		"shifted": func(b *Binding) { b.Pool, b.Namespace = "rbdn", "s" },
	} {
		b := testBinding
		change(&b)
		others[what] = b
	}
	for what, b := range others {
		if got, err := Unwrap(w, testKEK(1), b); !errors.Is(err, ErrWrongKEK) {
			t.Errorf("another %s (%s): %x, %v; want ErrWrongKEK", what, b, got, err)
		}
	}
	if _, err := Unwrap(w, testKEK(1), Binding{KMSID: "t", Pool: "rbd"}); err == nil {
		t.Error("an empty binding unwrapped")
	}
}

// legacyWrap is a wrap as releases before the binding made them.
func legacyWrap(t testing.TB, kekID string, kek, dek []byte) Wrapped {
	t.Helper()
	salt, nonce := bytes.Repeat([]byte{3}, saltSize), bytes.Repeat([]byte{4}, 12)
	aead, err := sealer(kek, salt)
	if err != nil {
		t.Fatal(err)
	}
	sealed := aead.Seal(nil, nonce, dek, []byte("v1."+kekID))
	enc := base64.RawURLEncoding.EncodeToString
	return Wrapped(strings.Join([]string{"v1", kekID, enc(salt), enc(nonce), enc(sealed)}, "."))
}

// A legacy wrap still opens, for any image (it was bound to none), and
// says it is due for a re-wrap.
func TestLegacyWrapOpens(t *testing.T) {
	dek, _ := NewDEK()
	w := legacyWrap(t, "old", testKEK(1), dek)
	if w.Bound() || w.KEKID() != "old" {
		t.Errorf("legacy wrap: Bound %v, KEKID %q", w.Bound(), w.KEKID())
	}
	for _, b := range []Binding{testBinding, {KMSID: "x", Pool: "p", Image: "i"}} {
		if got, err := Unwrap(w, testKEK(1), b); err != nil || !bytes.Equal(got, dek) {
			t.Errorf("Unwrap(legacy, %s) = %x, %v", b, got, err)
		}
	}
	if _, err := Unwrap(w, testKEK(2), testBinding); !errors.Is(err, ErrWrongKEK) {
		t.Errorf("legacy wrap under another KEK: %v", err)
	}
}

// FuzzUnwrap: no stored string, however malformed, panics Unwrap or opens
// without the KEK that wrapped it; what the KEK opens is a wrap of the one
// key it wrapped (here, in this run or in the run that wrote a corpus
// file), under the ID it names, spelled as Wrap spells it: no second
// spelling of a wrapped key opens.
// canonical: s is v1. or v2.<id>.<b64>.<b64>.<b64> with each base64 field
// the one spelling of its bytes.
func canonical(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 5 || (parts[0] != "v1" && parts[0] != "v2") {
		return false
	}
	for _, p := range parts[2:] {
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || base64.RawURLEncoding.EncodeToString(b) != p {
			return false
		}
	}
	return true
}

func FuzzUnwrap(f *testing.F) {
	dek := bytes.Repeat([]byte{7}, DEKSize)
	w, err := Wrap("k", testKEK(1), dek, testBinding)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(w))
	f.Add(string(legacyWrap(f, "k", testKEK(1), dek)))
	f.Add("v1.k.AAAA.AAAA.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Unwrap(Wrapped(s), testKEK(2), testBinding)
		if err == nil {
			t.Fatalf("Unwrap(%q) with a KEK that wrapped nothing gave %x", s, got)
		}
		got, err = Unwrap(Wrapped(s), testKEK(1), testBinding)
		if err != nil {
			return
		}
		if !bytes.Equal(got, dek) || Wrapped(s).KEKID() != "k" || !canonical(s) {
			t.Fatalf("Unwrap(%q) opened to %x; only wraps of %x under k, as Wrap spells them, open", s, got, dek)
		}
	})
}
