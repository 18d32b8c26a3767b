package controller

import (
	"context"
	"errors"

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

func pending(what string) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", what)
}
