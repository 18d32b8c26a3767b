package main

import (
	"testing"
	"time"
)

func TestFenceExpiryFlag(t *testing.T) {
	if f, err := parseFlags([]string{"--mode=controller"}); err != nil || f.ctrl.FenceExpiry != time.Hour {
		t.Fatalf("default: %v, %v; want 1h", f.ctrl.FenceExpiry, err)
	}
	if f, err := parseFlags([]string{"--mode=controller", "--fence-expiry=24h"}); err != nil || f.ctrl.FenceExpiry != 24*time.Hour {
		t.Fatalf("--fence-expiry=24h: %v, %v", f.ctrl.FenceExpiry, err)
	}
	for _, bad := range []string{"0", "500ms", "-1h"} {
		if _, err := parseFlags([]string{"--mode=controller", "--fence-expiry=" + bad}); err == nil {
			t.Errorf("--fence-expiry=%s accepted", bad)
		}
	}
}
