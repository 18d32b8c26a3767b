package ceph

import (
	"context"
	"errors"
	"fmt"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// SetOmap sets keys on a RADOS object's omap, creating the object.
func (b *Backend) SetOmap(ctx context.Context, p rbd.Pool, object string, kv map[string]string) error {
	return b.withIoctx(ctx, p, "SetOmap", func(ioctx *rados.IOContext) error {
		pairs := make(map[string][]byte, len(kv))
		for k, v := range kv {
			pairs[k] = []byte(v)
		}
		if err := ioctx.SetOmap(object, pairs); err != nil {
			return fmt.Errorf("writing %s: %w", object, classify(err))
		}
		return nil
	})
}

// GetOmap reads one key of a RADOS object's omap; ok is false when the key
// or the object does not exist.
func (b *Backend) GetOmap(ctx context.Context, p rbd.Pool, object, key string) (value string, ok bool, err error) {
	err = b.withIoctx(ctx, p, "GetOmap", func(ioctx *rados.IOContext) error {
		vals, err := ioctx.GetOmapValues(object, "", key, 8)
		if err = classify(err); errors.Is(err, rbd.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", object, err)
		}
		v, found := vals[key]
		value, ok = string(v), found
		return nil
	})
	return value, ok, err
}

// RemoveOmapKeys removes keys from a RADOS object's omap.
func (b *Backend) RemoveOmapKeys(ctx context.Context, p rbd.Pool, object string, keys ...string) error {
	return b.withIoctx(ctx, p, "RemoveOmapKeys", func(ioctx *rados.IOContext) error {
		if err := classify(ioctx.RmOmapKeys(object, keys)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return fmt.Errorf("removing keys from %s: %w", object, err)
		}
		return nil
	})
}

// ListOmap reads the keys of a RADOS object's omap that start with prefix;
// a missing object has none.
func (b *Backend) ListOmap(ctx context.Context, p rbd.Pool, object, prefix string) (map[string]string, error) {
	out := map[string]string{}
	err := b.withIoctx(ctx, p, "ListOmap", func(ioctx *rados.IOContext) error {
		vals, err := ioctx.GetAllOmapValues(object, "", prefix, 256)
		if err = classify(err); errors.Is(err, rbd.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", object, err)
		}
		for k, v := range vals {
			out[k] = string(v)
		}
		return nil
	})
	return out, err
}
