// Package grpcerr maps the sentinel errors of the backend packages to gRPC
// codes, so that the controller and node services answer a cause alike.
// Each service brings its own table; the storage contract's causes that
// all of them answer alike are one table here (Ceph), which the services
// extend.
package grpcerr

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Rule gives the code for errors that wrap Err.
type Rule struct {
	Err  error
	Code codes.Code
}

// Table is a service's list of rules; the first one that matches wins.
type Table []Rule

// Code is the code for err. A spent or cancelled context comes before any
// rule: the caller's own deadline is the cause, whatever step it hit.
// Anything unknown is Internal.
func (t Table) Code(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	for _, r := range t {
		if errors.Is(err, r.Err) {
			return r.Code
		}
	}
	return codes.Internal
}

// Status returns err as a status error with its code and message.
func (t Table) Status(err error) error {
	return status.Error(t.Code(err), err.Error())
}
