package main

import (
	"strings"
	"testing"
)

// The csi-addons endpoint is a socket of its own, in every mode, and on
// loopback unless --allow-remote-endpoint says otherwise.
func TestAddonsEndpointFlag(t *testing.T) {
	for _, ok := range [][]string{
		{"--mode=controller", "--endpoint=unix:///tmp/x/csi.sock", "--csi-addons-endpoint=unix:///tmp/x/csi-addons.sock"},
		{"--mode=node", "--nodeid=n", "--endpoint=unix:///tmp/x/csi.sock", "--csi-addons-endpoint=unix:///tmp/x/csi-addons.sock"},
	} {
		if f, err := parseFlags(ok); err != nil || f.addonsEndpoint != "unix:///tmp/x/csi-addons.sock" {
			t.Fatalf("%v: %+v %v", ok, f.addonsEndpoint, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode=controller", "--endpoint=unix:///tmp/x/csi.sock", "--csi-addons-endpoint=unix:///tmp/x/csi.sock"}, "must differ"},
		{[]string{"--mode=controller", "--csi-addons-endpoint=tcp://0.0.0.0:9070"}, "--allow-remote-endpoint"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
