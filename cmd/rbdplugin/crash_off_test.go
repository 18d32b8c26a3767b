//go:build !faultinject

package main

import (
	"strings"
	"testing"
)

// A production build does not know --test-crash-at.
func TestNoCrashFlagWithoutTheTag(t *testing.T) {
	t.Setenv("RBDCSI_ALLOW_TEST_CRASH", "1")
	_, err := parseFlags([]string{"--mode=controller", "--test-crash-at=CreateVolume:created"})
	if err == nil || !strings.Contains(err.Error(), "flag provided but not defined") {
		t.Fatalf("--test-crash-at in a build without faultinject: %v, want an unknown flag", err)
	}
}
