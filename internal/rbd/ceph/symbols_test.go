package ceph

import (
	"errors"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

func TestDefined(t *testing.T) {
	if !defined("rbd_open") {
		t.Error("rbd_open, in every librbd, is not found")
	}
	if defined("rbd_no_such_call") {
		t.Error("a made-up symbol is found")
	}
}

func TestGroupSnapshotSupport(t *testing.T) {
	if err := groupSnapshotSupport(func(string) bool { return true }); err != nil {
		t.Errorf("with every call: %v", err)
	}
	err := groupSnapshotSupport(func(fn string) bool { return fn != "rbd_clone4" })
	if !errors.Is(err, rbd.ErrNotSupported) || !strings.Contains(err.Error(), "rbd_clone4") {
		t.Errorf("without rbd_clone4: %v, want ErrNotSupported naming it", err)
	}
}
