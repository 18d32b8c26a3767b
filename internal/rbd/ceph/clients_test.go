package ceph

import (
	"slices"
	"testing"
)

func TestClientAddrs(t *testing.T) {
	for in, want := range map[string][]string{
		"127.0.0.1:0/3306049040":              {"127.0.0.1:0/3306049040"},
		"[v2:10.0.0.1:0/42,v1:10.0.0.1:0/42]": {"10.0.0.1:0/42", "10.0.0.1:0/42"},
		"any:10.0.0.1:0/42":                   {"10.0.0.1:0/42"},
		"[v2:[2001:db8::1]:0/7]":              {"[2001:db8::1]:0/7"},
		"":                                    nil,
	} {
		if got := clientAddrs(in); !slices.Equal(got, want) {
			t.Errorf("clientAddrs(%q) = %q, want %q", in, got, want)
		}
	}
	own := map[string]bool{"10.0.0.1:0/42": true}
	if !ownsAny(own, "10.0.0.1:0/42") || !ownsAny(own, "v2:10.0.0.1:0/42") {
		t.Error("our own address is not recognized")
	}
	if ownsAny(own, "10.0.0.1:0/43") || ownsAny(own, "10.0.0.2:0/42") {
		t.Error("another client (other nonce or host) is taken for ours")
	}
}
