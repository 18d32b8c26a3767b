package ceph

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// errClosed: the connection cache was closed under a call.
var errClosed = errors.New("connection cache closed")

type errnoer interface{ ErrorCode() int }

// classify wraps a go-ceph error with the sentinel its errno means.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var e errnoer
	if !errors.As(err, &e) {
		return err
	}
	var kind error
	switch syscall.Errno(-e.ErrorCode()) {
	case syscall.ENOENT:
		kind = rbd.ErrNotFound
	case syscall.EEXIST:
		kind = rbd.ErrExists
	case syscall.EBUSY, syscall.EMLINK: // EMLINK: librbd removes no image in a group
		kind = rbd.ErrBusy
	case syscall.ENOTEMPTY:
		kind = rbd.ErrHasSnapshots
	case syscall.ENOSPC, syscall.EDQUOT:
		kind = rbd.ErrNoSpace
	case syscall.ETIMEDOUT, syscall.ENOTCONN, syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ESHUTDOWN:
		kind = rbd.ErrUnavailable
	case syscall.EPERM, syscall.EACCES:
		kind = rbd.ErrPermission
	case syscall.EINVAL, syscall.ERANGE, syscall.EDOM:
		kind = rbd.ErrInvalid
	case syscall.ENOSYS: // go-ceph's ErrNotImplemented: librbd lacks the call
		kind = rbd.ErrNotSupported
	default:
		return err
	}
	return fmt.Errorf("%w: %w", kind, err)
}

// wrapCtx turns a context error into one that says the cluster did not
// answer in time, keeping the context error for errors.Is.
func wrapCtx(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Ceph did not answer before the request's deadline: %w", err)
	}
	return err
}
