package snapmeta

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// walk sends the extents of the target snapshot from offset on (a delta
// from base when base is set), in order, at most maxResults per message,
// asking the backend for a page of extents at a time. Extents that touch
// across pages are joined, so a client sees each range once. A stream
// with no extent still carries one message: the volume's size. Offsets
// are the user's device's; the size is the volume's capacity, which for
// an encrypted volume includes its LUKS header, as the capacity of the
// PVC does.
func (s *Server) walk(ctx context.Context, t snapshot, base *snapshot, offset int64, maxResults int32, send func(size int64, b []*csi.BlockMetadata) error) error {
	size := t.size
	if uint64(offset) > size {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is past the end of snapshot %s (%d bytes)", offset, t.id, size)
	}
	per := int(maxResults)
	if per == 0 {
		per = DefaultMaxResults
	}
	var batch []*csi.BlockMetadata
	sent := false
	flush := func(atLeast int) error {
		for len(batch) >= atLeast && len(batch) > 0 {
			n := min(len(batch), per)
			if err := send(int64(size), batch[:n]); err != nil {
				return err
			}
			batch, sent = batch[n:], true
		}
		return nil
	}
	var pending *rbd.Extent
	for off := min(uint64(offset)+t.skip, size); off < size; {
		exts, err := s.o.Backend.Diff(ctx, t.pool, t.spec(base, off, size-off, s.o.Page))
		if err != nil {
			return diffStatus(t.id, err)
		}
		next := size
		if len(exts) >= s.o.Page {
			// A full page: the rest starts where its last extent ends.
			if next = exts[len(exts)-1].End(); next <= off {
				return status.Errorf(codes.Internal, "diff of snapshot %s from %d answered %d extents ending at %d: no progress", t.id, off, len(exts), next)
			}
		}
		for _, e := range userExtents(exts, t.skip) {
			if pending != nil && pending.End() == e.Offset {
				pending.Length += e.Length
				continue
			}
			if pending != nil {
				batch = append(batch, block(*pending))
			}
			pending = &e
		}
		if err := flush(per); err != nil {
			return err
		}
		off = next
	}
	if pending != nil {
		batch = append(batch, block(*pending))
	}
	if err := flush(1); err != nil {
		return err
	}
	if !sent {
		return send(int64(size), nil)
	}
	return nil
}

func block(e rbd.Extent) *csi.BlockMetadata {
	return &csi.BlockMetadata{ByteOffset: int64(e.Offset), SizeBytes: int64(e.Length)}
}
