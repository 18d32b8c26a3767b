package grpcerr

import (
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Ceph is the table of the storage contract's causes that every service
// answers alike, followed by the service's own rows. Those come after the
// common ones: a cause the contract wraps in two sentinels (a missing
// RADOS namespace is a missing pool) keeps the common code, and a service
// decides the codes that depend on its call (AlreadyExists, a mirrored
// copy's state) before it reaches this table.
func Ceph(own ...Rule) Table {
	t := Table{
		{Err: rbd.ErrUnavailable, Code: codes.Unavailable},
		{Err: rbd.ErrPermission, Code: codes.PermissionDenied},
		{Err: rbd.ErrUnusableKey, Code: codes.InvalidArgument},
		{Err: rbd.ErrNoSpace, Code: codes.ResourceExhausted},
		{Err: rbd.ErrPoolNotFound, Code: codes.NotFound},
		{Err: rbd.ErrNotFound, Code: codes.NotFound},
	}
	return append(t, own...)
}
