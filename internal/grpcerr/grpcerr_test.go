package grpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

func TestTable(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	table := Table{{Err: errA, Code: codes.NotFound}, {Err: errB, Code: codes.Unavailable}}
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", errA), codes.NotFound},
		{fmt.Errorf("x: %w", errB), codes.Unavailable},
		{fmt.Errorf("%w: %w", errB, errA), codes.NotFound}, // first rule wins
		{fmt.Errorf("%w: %w", errA, context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{errors.New("other"), codes.Internal},
	} {
		err := table.Status(c.err)
		if s, _ := status.FromError(err); s.Code() != c.want || s.Message() != c.err.Error() {
			t.Errorf("Status(%v) = %v, want code %v", c.err, err, c.want)
		}
	}
}

// The common rows come first, a service's own after them.
func TestCeph(t *testing.T) {
	own := Ceph(Rule{Err: rbd.ErrBusy, Code: codes.Unavailable}, Rule{Err: rbd.ErrNotFound, Code: codes.FailedPrecondition})
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", rbd.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("x: %w", rbd.ErrPermission), codes.PermissionDenied},
		{fmt.Errorf("x: %w", rbd.ErrUnusableKey), codes.InvalidArgument},
		{fmt.Errorf("x: %w", rbd.ErrNoSpace), codes.ResourceExhausted},
		{fmt.Errorf("%w: %w", rbd.ErrPoolNotFound, rbd.ErrNamespaceNotFound), codes.NotFound},
		{fmt.Errorf("x: %w", rbd.ErrNotFound), codes.NotFound}, // the common row wins
		{fmt.Errorf("x: %w", rbd.ErrBusy), codes.Unavailable},
		{fmt.Errorf("x: %w", rbd.ErrExists), codes.Internal},
	} {
		if got := own.Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if len(Ceph()) != 6 {
		t.Errorf("Ceph() has %d rows, want the 6 common ones", len(Ceph()))
	}
}
