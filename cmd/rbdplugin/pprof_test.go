package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPprof(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := servePprof(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Errorf("heap profile: %s %.100s", resp.Status, body)
	}
	cancel()
}

// Profiles are served on loopback only.
func TestPprofOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "10.0.0.5:0", "no-port"} {
		if _, err := servePprof(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--pprof-address %s: %v, want a refusal", addr, err)
		}
	}
}
