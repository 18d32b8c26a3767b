package rbd

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Errors the callers act on. Every error this package returns that has one
// of these causes wraps it, so errors.Is works.
var (
	ErrNotFound     = errors.New("not found")
	ErrPoolNotFound = errors.New("pool not found")
	// ErrNamespaceNotFound comes wrapped with ErrPoolNotFound: to a
	// volume, a missing namespace is a missing pool.
	ErrNamespaceNotFound = errors.New("RADOS namespace not found")
	ErrExists            = errors.New("already exists")
	ErrBusy              = errors.New("in use")
	ErrHasSnapshots      = errors.New("has snapshots")
	ErrNoSpace           = errors.New("no space left in pool")
	ErrUnavailable       = errors.New("cluster unavailable")
	ErrPermission        = errors.New("permission denied")
	ErrInvalid           = errors.New("invalid argument")
	errClosed            = errors.New("connection cache closed")
)

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
		kind = ErrNotFound
	case syscall.EEXIST:
		kind = ErrExists
	case syscall.EBUSY:
		kind = ErrBusy
	case syscall.ENOTEMPTY:
		kind = ErrHasSnapshots
	case syscall.ENOSPC, syscall.EDQUOT:
		kind = ErrNoSpace
	case syscall.ETIMEDOUT, syscall.ENOTCONN, syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ESHUTDOWN:
		kind = ErrUnavailable
	case syscall.EPERM, syscall.EACCES:
		kind = ErrPermission
	case syscall.EINVAL, syscall.ERANGE, syscall.EDOM:
		kind = ErrInvalid
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
