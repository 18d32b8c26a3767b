//go:build faultinject

package main

import (
	"strings"
	"testing"
)

func TestCrashFlagNeedsTheTestEnvironment(t *testing.T) {
	args := []string{"--mode=controller", "--test-crash-at=CreateVolume:created"}
	t.Setenv(crashEnv, "")
	if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), crashEnv) {
		t.Fatalf("--test-crash-at without %s: %v, want refused naming it", crashEnv, err)
	}
	t.Setenv(crashEnv, "1")
	if f, err := parseFlags(args); err != nil || f.crashAt != "CreateVolume:created" {
		t.Fatalf("--test-crash-at with %s=1: %+v, %v", crashEnv, f, err)
	}
}
