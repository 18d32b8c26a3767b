package addons

import (
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// cephCodes are the codes of the backend's causes common to every call;
// what a call must decide itself (a promote that needs force, a resync
// that is not called for) it decides before this table.
func cephCodes() grpcerr.Table {
	return grpcerr.Table{
		{Err: rbd.ErrUnavailable, Code: codes.Unavailable},
		{Err: rbd.ErrPermission, Code: codes.PermissionDenied},
		{Err: rbd.ErrUnusableKey, Code: codes.InvalidArgument},
		{Err: rbd.ErrNoSpace, Code: codes.ResourceExhausted},
		{Err: rbd.ErrPoolNotFound, Code: codes.NotFound},
		{Err: rbd.ErrNotFound, Code: codes.NotFound},
		{Err: rbd.ErrNotMirrored, Code: codes.FailedPrecondition},
		{Err: rbd.ErrInvalid, Code: codes.FailedPrecondition},
		{Err: rbd.ErrBusy, Code: codes.Unavailable},
	}
}

// cephStatus turns a backend error into a gRPC status.
func cephStatus(err error) error { return cephCodes().Status(err) }
