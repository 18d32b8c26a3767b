package rbd

import (
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
