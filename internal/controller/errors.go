package controller

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// cephStatus turns a backend error into the gRPC status a caller can act
// on; the causes that are the same for every call are decided here, the
// call-specific ones (NotFound, AlreadyExists) by the caller first.
func cephStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, rbd.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, rbd.ErrPermission):
		code = codes.PermissionDenied
	case errors.Is(err, rbd.ErrNoSpace):
		code = codes.ResourceExhausted
	case errors.Is(err, rbd.ErrPoolNotFound):
		code = codes.NotFound
	case errors.Is(err, rbd.ErrNotFound):
		code = codes.NotFound
	}
	return status.Error(code, err.Error())
}

// writeStatus is cephStatus for a failed write: Ceph makes writes to a
// full pool wait rather than fail, so a write that timed out on a full pool
// is reported as what it is, ResourceExhausted.
func (c *Controller) writeStatus(pool rbd.Pool, err error) error {
	if errors.Is(err, rbd.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		// The request's context may be spent; the check gets its own.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if full, ferr := c.backend.PoolFull(ctx, pool); ferr == nil && full {
			return status.Errorf(codes.ResourceExhausted, "pool %s is full (its quota is reached or an OSD is full): %v", pool.Name, err)
		}
	}
	return cephStatus(err)
}

func pending(what string) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", what)
}
