package main

import "testing"

func TestListenAddress(t *testing.T) {
	for in, want := range map[string]string{
		":9819":            ":9819",
		"10.0.0.5:9819":    "10.0.0.5:9819",
		"fd00::5:9819":     "[fd00::5]:9819",
		"[fd00::5]:9819":   "[fd00::5]:9819",
		"2001:db8::1:80":   "[2001:db8::1]:80",
		"localhost:9819":   "localhost:9819",
		"not:an:address:1": "not:an:address:1",
	} {
		if got := listenAddress(in); got != want {
			t.Errorf("listenAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
