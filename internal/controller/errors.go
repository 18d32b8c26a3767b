package controller

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// cephCodes are the codes of the backend's causes that are the same for
// every call, the ones every service shares; the call-specific ones
// (NotFound, AlreadyExists) are decided by the caller first.
func cephCodes() grpcerr.Table { return grpcerr.Ceph() }

// cephStatus turns a backend error into the gRPC status a caller can act on.
func cephStatus(err error) error {
	return cephCodes().Status(err)
}

// writeStatus is cephStatus for a failed write: Ceph makes writes to a
// full pool wait rather than fail, so a write that timed out on a full pool
// is reported as what it is, ResourceExhausted.
func (c *Controller) writeStatus(pool rbd.Pool, err error) error {
	if errors.Is(err, rbd.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		// The request's context may be spent; the check gets its own.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if h, ferr := c.backend.PoolHealth(ctx, pool); ferr == nil && h.Full {
			return status.Errorf(codes.ResourceExhausted, "pool %s is full (its quota is reached or an OSD is full): %v", pool.Name, err)
		}
	}
	return cephStatus(err)
}

func pending(what string) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", what)
}
