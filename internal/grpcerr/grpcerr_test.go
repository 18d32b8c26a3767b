package grpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
