package rbd

import (
	"errors"
	"slices"
	"testing"
)

// The marker is written after every other key, whatever it sorts as, so
// its presence proves the rest were written.
func TestMetadataOrderWritesTheMarkerLast(t *testing.T) {
	for _, c := range []struct {
		spec ImageSpec
		want []string
	}{
		{ImageSpec{Metadata: map[string]string{"b": "", "a": "", "z": ""}, Marker: "a"}, []string{"b", "z", "a"}},
		{ImageSpec{Metadata: map[string]string{"b": "", "a": ""}}, []string{"a", "b"}},
		{ImageSpec{Metadata: map[string]string{"b": ""}, Marker: "a"}, []string{"b"}},
		{ImageSpec{}, []string{}},
	} {
		if got := c.spec.MetadataOrder(); !slices.Equal(got, c.want) {
			t.Errorf("%v marker %q: order %v, want %v", c.spec.Metadata, c.spec.Marker, got, c.want)
		}
	}
}

// A whole host, a range or anything with spaces is never a client
// address: blocklisting it would bar more than one client.
func TestValidClientAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:0/85892054", "[::1]:0/1", "10.1.2.3:6789/0"} {
		if err := ValidClientAddr(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:0", "10.0.0.0/24", "10.0.0.0:0/x", "a b/1", "127.0.0.1:0/1\n"} {
		if err := ValidClientAddr(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}
