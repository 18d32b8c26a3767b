package main

import (
	"strings"
	"testing"
)

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

// A TCP endpoint off loopback serves the CSI API to anyone who reaches
// it: refused unless --allow-remote-endpoint says so.
func TestRemoteEndpointNeedsTheFlag(t *testing.T) {
	for _, ep := range []string{"unix:///csi/csi.sock", "tcp://127.0.0.1:10000", "tcp://[::1]:10000", "tcp://localhost:10000"} {
		if _, err := parseFlags([]string{"--mode=controller", "--endpoint=" + ep}); err != nil {
			t.Errorf("%s refused: %v", ep, err)
		}
	}
	for _, ep := range []string{"tcp://:10000", "tcp://0.0.0.0:10000", "tcp://10.0.0.5:10000", "tcp://[::]:10000", "tcp://example.com:10000"} {
		if _, err := parseFlags([]string{"--mode=controller", "--endpoint=" + ep}); err == nil || !strings.Contains(err.Error(), "--allow-remote-endpoint") {
			t.Errorf("%s: %v, want a refusal naming --allow-remote-endpoint", ep, err)
		}
		if _, err := parseFlags([]string{"--mode=controller", "--endpoint=" + ep, "--allow-remote-endpoint"}); err != nil {
			t.Errorf("%s with --allow-remote-endpoint: %v", ep, err)
		}
	}
}
