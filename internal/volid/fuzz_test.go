package volid

import (
	"regexp"
	"strings"
	"testing"
)

// part is what each field of an accepted ID must be: a plain name that is
// safe in a path, an object name and a log line, never "." or "..".
var part = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// checkDecoded asserts what an accepted ID promises: it is printable,
// within MaxLen, the expected number of plain fields under its own
// version prefix, and encodes back to itself (one ID, one object).
func checkDecoded(t *testing.T, id, prefix string, fields int, encoded string) {
	t.Helper()
	if encoded != id || len(id) > MaxLen {
		t.Fatalf("%q accepted, which encodes to %q (%d bytes)", id, encoded, len(id))
	}
	parts := strings.Split(id, ":")
	if len(parts) != fields || parts[0] != prefix {
		t.Fatalf("%q accepted with %d fields, want %d under %s", id, len(parts), fields, prefix)
	}
	for _, p := range parts[1:] {
		if !part.MatchString(p) || p == "." || p == ".." {
			t.Fatalf("%q accepted with the field %q", id, p)
		}
	}
}

// checkRefused: a string that is not an ID is ErrMalformed and nothing
// else, which the controller answers as NotFound.
func checkRefused(t *testing.T, what, id string, err error) {
	t.Helper()
	if err != ErrMalformed {
		t.Fatalf("%s(%q) failed with %v, not ErrMalformed", what, id, err)
	}
}

func FuzzDecodeVolume(f *testing.F) {
	for _, s := range []string{"v1:c:p:i", "v1:c:p:csi-vol-00", "s1:c:p:id:snap", "", "v1:::", "v1:a:b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		v, err := DecodeVolume(id)
		if err != nil {
			checkRefused(t, "DecodeVolume", id, err)
			return
		}
		checkDecoded(t, id, "v1", 4, v.String())
		if v.Validate() != nil {
			t.Fatalf("DecodeVolume(%q) gave %+v, which does not validate", id, v)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range []string{"s1:c:p:10b2e8c1f3a4:csi-snap-00", "v1:c:p:i", "s1::::", "s1:c:p:i:s:x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		s, err := DecodeSnapshot(id)
		if err != nil {
			checkRefused(t, "DecodeSnapshot", id, err)
			return
		}
		checkDecoded(t, id, "s1", 5, s.String())
		if s.Validate() != nil {
			t.Fatalf("DecodeSnapshot(%q) gave %+v, which does not validate", id, s)
		}
	})
}

func FuzzDecodeGroup(f *testing.F) {
	for _, s := range []string{"g1:c:p:csi-group-00", "g1:c:p", "v1:c:p:i", "g1:c:p:..", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		g, err := DecodeGroup(id)
		if err != nil {
			checkRefused(t, "DecodeGroup", id, err)
			return
		}
		checkDecoded(t, id, "g1", 4, g.String())
		if g.Validate() != nil {
			t.Fatalf("DecodeGroup(%q) gave %+v, which does not validate", id, g)
		}
	})
}
