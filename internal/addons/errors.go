package addons

import (
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// cephCodes are the codes of the backend's causes common to every call;
// what a call must decide itself (a promote that needs force, a resync
// that is not called for) it decides before this table. Beyond the
// common rows: a mirroring state that does not allow the call, and a busy
// image, which a retry may find free.
func cephCodes() grpcerr.Table {
	return grpcerr.Ceph(
		grpcerr.Rule{Err: rbd.ErrNotMirrored, Code: codes.FailedPrecondition},
		grpcerr.Rule{Err: rbd.ErrInvalid, Code: codes.FailedPrecondition},
		grpcerr.Rule{Err: rbd.ErrBusy, Code: codes.Unavailable},
	)
}

// cephStatus turns a backend error into a gRPC status.
func cephStatus(err error) error { return cephCodes().Status(err) }
