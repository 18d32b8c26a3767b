package main

import (
	"strings"
	"testing"
)

// --version needs none of the flags a serving plugin needs, and says what
// the link stamped into the binary.
func TestVersionFlag(t *testing.T) {
	f, err := parseFlags([]string{"--version"})
	if err != nil || !f.showVersion {
		t.Fatalf("--version: %v (show %v)", err, f.showVersion)
	}
	line := versionLine()
	for _, want := range []string{"rbdplugin " + version, "commit " + commit, "librbd " + librbd, "go-ceph v"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
}
