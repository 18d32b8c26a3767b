package ceph

import (
	"context"
	"errors"
	"fmt"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Claim records a name -> value claim in a small RADOS object of its own,
// created exclusively: the first claim wins and later ones read it back.
// It returns the value that holds the claim.
func (b *Backend) Claim(ctx context.Context, p rbd.Pool, object, value string) (string, error) {
	var holder string
	err := b.withIoctx(ctx, p, "Claim", func(ioctx *rados.IOContext) error {
		op := rados.CreateWriteOp()
		defer op.Release()
		op.Create(rados.CreateExclusive)
		op.WriteFull([]byte(value))
		err := classify(op.Operate(ioctx, object, rados.OperationNoFlag))
		if err == nil {
			holder = value
			return nil
		}
		if !errors.Is(err, rbd.ErrExists) {
			return fmt.Errorf("claiming %s: %w", object, err)
		}
		buf := make([]byte, 256)
		n, err := ioctx.Read(object, buf, 0)
		if err != nil {
			return fmt.Errorf("reading claim %s: %w", object, classify(err))
		}
		holder = string(buf[:n])
		return nil
	})
	return holder, err
}

// Unclaim removes a claim object; a missing one is fine.
func (b *Backend) Unclaim(ctx context.Context, p rbd.Pool, object string) error {
	return b.withIoctx(ctx, p, "Unclaim", func(ioctx *rados.IOContext) error {
		if err := classify(ioctx.Delete(object)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return fmt.Errorf("removing claim %s: %w", object, err)
		}
		return nil
	})
}

// ClaimHolder reads the value holding a claim; ok is false when there is
// no claim.
func (b *Backend) ClaimHolder(ctx context.Context, p rbd.Pool, object string) (holder string, ok bool, err error) {
	err = b.withIoctx(ctx, p, "ClaimHolder", func(ioctx *rados.IOContext) error {
		buf := make([]byte, 256)
		n, err := ioctx.Read(object, buf, 0)
		if err = classify(err); errors.Is(err, rbd.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading claim %s: %w", object, err)
		}
		holder, ok = string(buf[:n]), true
		return nil
	})
	return holder, ok, err
}
