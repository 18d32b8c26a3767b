package ceph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// BackendOptions are optional parts of a Backend.
type BackendOptions struct {
	// Observer is told how long each Ceph operation took.
	Observer rbd.Observer
	// Fault, for crash tests only, is called at named points inside
	// multi-step operations ("CreateImage:created").
	Fault func(point string)
}

// Backend runs image operations on cached connections.
type Backend struct {
	conns    *Conns
	observer rbd.Observer
	fault    func(string)
	// groupSnaps is GroupSnapshots' answer, learnt once from the linked
	// librbd.
	groupSnaps error
}

// NewBackend returns a backend over the given connection cache.
func NewBackend(conns *Conns, o BackendOptions) *Backend {
	fault := o.Fault
	if fault == nil {
		fault = func(string) {}
	}
	return &Backend{conns: conns, observer: o.Observer, fault: fault, groupSnaps: groupSnapshotSupport(defined)}
}

func (b *Backend) observe(op string, took time.Duration, err error) {
	if b.observer != nil {
		b.observer.ObserveCephOp(op, took, err)
	}
}

// withConn runs fn on a cached connection in its own goroutine and returns
// when fn does or when ctx ends, whichever is first. librados' op timeouts
// bound how long fn can outlive an abandoned request; the connection
// reference is released only once fn has returned.
func (b *Backend) withConn(ctx context.Context, monHost string, cred cluster.Credentials, op string, fn func(*rados.Conn) error) error {
	conn, release, err := b.conns.get(ctx, monHost, cred)
	if err != nil {
		b.observe(op, 0, err)
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer release()
		start := time.Now()
		err := fn(conn)
		b.observe(op, time.Since(start), err)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return wrapCtx(ctx.Err())
	}
}

// withIoctx is withConn with an I/O context on the pool. A refusal names
// the user and the OSD caps the pool needs (rbd.RefusedOn).
func (b *Backend) withIoctx(ctx context.Context, p rbd.Pool, op string, fn func(*rados.IOContext) error) error {
	return rbd.RefusedOn(p, b.withConn(ctx, p.MonHost, p.Cred, op, func(conn *rados.Conn) error {
		ioctx, err := openIoctx(conn, p)
		if err != nil {
			return err
		}
		defer ioctx.Destroy()
		return fn(ioctx)
	}))
}

// inMissingNamespace names a missing RADOS namespace as the cause of a
// not-found, when the pool's namespace list says so (a user limited to
// its namespace may not read that list: then err stays as it is). Only
// image creation asks: elsewhere a not-found is an answer, not a fault.
func inMissingNamespace(ioctx *rados.IOContext, p rbd.Pool, err error) error {
	if p.Namespace == "" || !errors.Is(err, rbd.ErrNotFound) {
		return err
	}
	ioctx.SetNamespace("")
	defer ioctx.SetNamespace(p.Namespace)
	if exists, lerr := librbd.NamespaceExists(ioctx, p.Namespace); lerr != nil || exists {
		return err
	}
	return fmt.Errorf("%w: %w: %q in pool %q (rbd namespace create %s/%s)", rbd.ErrPoolNotFound, rbd.ErrNamespaceNotFound, p.Namespace, p.Name, p.Name, p.Namespace)
}

// openIoctx opens the pool, in its RADOS namespace when one is set.
func openIoctx(conn *rados.Conn, p rbd.Pool) (*rados.IOContext, error) {
	ioctx, err := conn.OpenIOContext(p.Name)
	if err != nil {
		if errors.Is(classify(err), rbd.ErrNotFound) {
			return nil, fmt.Errorf("%w: pool %q", rbd.ErrPoolNotFound, p.Name)
		}
		return nil, fmt.Errorf("opening pool %q: %w", p.Name, classify(err))
	}
	ioctx.SetNamespace(p.Namespace)
	return ioctx, nil
}

// CreateImage creates an image and sets its metadata. An existing image of
// that name yields rbd.ErrExists and is left untouched.
func (b *Backend) CreateImage(ctx context.Context, p rbd.Pool, name string, spec rbd.ImageSpec) error {
	return b.withIoctx(ctx, p, "CreateImage", func(ioctx *rados.IOContext) error {
		opts := librbd.NewRbdImageOptions()
		defer opts.Destroy()
		fs := librbd.FeatureSetFromNames(spec.Features)
		if err := opts.SetUint64(librbd.ImageOptionFeatures, uint64(fs)); err != nil {
			return fmt.Errorf("image features: %w", classify(err))
		}
		if spec.DataPool != "" {
			if err := opts.SetString(librbd.ImageOptionDataPool, spec.DataPool); err != nil {
				return fmt.Errorf("data pool: %w", classify(err))
			}
		}
		if err := librbd.CreateImage(ioctx, name, spec.Size, opts); err != nil {
			err = inMissingNamespace(ioctx, p, fmt.Errorf("creating image %s/%s: %w", p.Name, name, classify(err)))
			return rbd.RefusedOn(p, err, spec.DataPool) // the data pool may be the one refused
		}
		b.fault("CreateImage:created")
		return setMetadata(ioctx, name, spec)
	})
}

func setMetadata(ioctx *rados.IOContext, name string, spec rbd.ImageSpec) error {
	if len(spec.Metadata) == 0 {
		return nil
	}
	img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
	if err != nil {
		return fmt.Errorf("opening image %s: %w", name, classify(err))
	}
	defer img.Close()
	return writeMetadata(img, name, spec)
}

// writeMetadata sets spec.Metadata in spec.MetadataOrder(), Marker last.
func writeMetadata(img *librbd.Image, name string, spec rbd.ImageSpec) error {
	for _, k := range spec.MetadataOrder() {
		if err := img.SetMetadata(k, spec.Metadata[k]); err != nil {
			return fmt.Errorf("setting metadata %s on image %s: %w", k, name, classify(err))
		}
	}
	return nil
}

// SetMetadata sets keys on an existing image.
func (b *Backend) SetMetadata(ctx context.Context, p rbd.Pool, name string, kv map[string]string) error {
	return b.withIoctx(ctx, p, "SetMetadata", func(ioctx *rados.IOContext) error {
		return setMetadata(ioctx, name, rbd.ImageSpec{Metadata: kv})
	})
}

// Stat reads an image's size, ID and metadata without registering a watch.
func (b *Backend) Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error) {
	var info rbd.ImageInfo
	err := b.withIoctx(ctx, p, "Stat", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImageReadOnly(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		info.Name = name
		if info.Size, err = img.GetSize(); err != nil {
			return fmt.Errorf("size of image %s: %w", name, classify(err))
		}
		if info.ID, err = img.GetId(); err != nil {
			return fmt.Errorf("id of image %s: %w", name, classify(err))
		}
		if info.Metadata, err = img.ListMetadata(); err != nil {
			return fmt.Errorf("metadata of image %s: %w", name, classify(err))
		}
		info.Features, err = features(img, name)
		return err
	})
	return info, err
}

// features are the image's features by name, sorted.
func features(img *librbd.Image, name string) ([]string, error) {
	bits, err := img.GetFeatures()
	if err != nil {
		return nil, fmt.Errorf("features of image %s: %w", name, classify(err))
	}
	fs := librbd.FeatureSet(bits)
	names := fs.Names()
	sort.Strings(names)
	return names, nil
}

// Resize sets the image size.
func (b *Backend) Resize(ctx context.Context, p rbd.Pool, name string, size uint64) error {
	return b.withIoctx(ctx, p, "Resize", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		if err := img.Resize(size); err != nil {
			return fmt.Errorf("resizing image %s/%s: %w", p.Name, name, classify(err))
		}
		return nil
	})
}

// RemoveImage deletes an image. It fails with rbd.ErrBusy while a client has
// the image open (mapped on a node) and with rbd.ErrHasSnapshots while it has
// snapshots.
func (b *Backend) RemoveImage(ctx context.Context, p rbd.Pool, name string) error {
	return b.withIoctx(ctx, p, "RemoveImage", func(ioctx *rados.IOContext) error {
		if err := librbd.RemoveImage(ioctx, name); err != nil {
			return fmt.Errorf("removing image %s/%s: %w", p.Name, name, classify(err))
		}
		return nil
	})
}

// ListImages returns the names of the pool's images, sorted.
func (b *Backend) ListImages(ctx context.Context, p rbd.Pool) ([]string, error) {
	var names []string
	err := b.withIoctx(ctx, p, "ListImages", func(ioctx *rados.IOContext) error {
		var err error
		names, err = librbd.GetImageNames(ioctx)
		if err != nil {
			return fmt.Errorf("listing images of pool %s: %w", p.Name, classify(err))
		}
		sort.Strings(names)
		return nil
	})
	return names, err
}

// PoolAvailable returns how many bytes can still be written to the pool, as
// `ceph df detail` reports it: max_avail (which accounts for replication
// and the fullest OSD), capped by the pool's byte quota. The statistics
// come from the ceph-mgr; without one Ceph has none to give.
func (b *Backend) PoolAvailable(ctx context.Context, p rbd.Pool) (int64, error) {
	var avail int64
	err := b.withConn(ctx, p.MonHost, p.Cred, "PoolAvailable", func(conn *rados.Conn) error {
		var err error
		avail, err = poolAvailable(conn, p.Name)
		return err
	})
	return avail, rbd.RefusedAt(p.Cred, cluster.CapMon+" "+cluster.CapMgr(p.Name), err)
}

// ListPools returns the cluster's pool names.
func (b *Backend) ListPools(ctx context.Context, monHost string, cred cluster.Credentials) ([]string, error) {
	var pools []string
	err := b.withConn(ctx, monHost, cred, "ListPools", func(conn *rados.Conn) error {
		var err error
		if pools, err = conn.ListPools(); err != nil {
			return fmt.Errorf("listing pools: %w", classify(err))
		}
		sort.Strings(pools)
		return nil
	})
	return pools, rbd.RefusedAt(cred, cluster.CapMon, err)
}

func poolAvailable(conn *rados.Conn, pool string) (int64, error) {
	out, status, err := conn.MonCommand([]byte(`{"prefix":"df","detail":"detail","format":"json"}`))
	if err != nil {
		return 0, fmt.Errorf("ceph df: %s: %w", status, classify(err))
	}
	var df struct {
		Pools []struct {
			Name  string `json:"name"`
			Stats struct {
				MaxAvail   int64 `json:"max_avail"`
				QuotaBytes int64 `json:"quota_bytes"`
				Stored     int64 `json:"stored"`
			} `json:"stats"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(out, &df); err != nil {
		return 0, fmt.Errorf("parsing ceph df: %w", err)
	}
	for _, p := range df.Pools {
		if p.Name != pool {
			continue
		}
		avail := p.Stats.MaxAvail
		if q := p.Stats.QuotaBytes; q > 0 {
			avail = max(0, min(avail, q-p.Stats.Stored))
		}
		return avail, nil
	}
	if len(df.Pools) == 0 {
		if _, err := conn.GetPoolByName(pool); err == nil {
			return 0, fmt.Errorf("%w: Ceph reports no pool statistics (is a ceph-mgr running?)", rbd.ErrUnavailable)
		}
	}
	return 0, fmt.Errorf("%w: pool %q", rbd.ErrPoolNotFound, pool)
}

// RemoveMetadata removes keys from an image; missing keys are fine.
func (b *Backend) RemoveMetadata(ctx context.Context, p rbd.Pool, name string, keys ...string) error {
	return b.withIoctx(ctx, p, "RemoveMetadata", func(ioctx *rados.IOContext) error {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		if err != nil {
			return fmt.Errorf("opening image %s/%s: %w", p.Name, name, classify(err))
		}
		defer img.Close()
		for _, k := range keys {
			if err := classify(img.RemoveMetadata(k)); err != nil && !errors.Is(err, rbd.ErrNotFound) {
				return fmt.Errorf("removing metadata %s of image %s: %w", k, name, err)
			}
		}
		return nil
	})
}

// Backend is the contract's go-ceph implementation.
var _ rbd.Backend = (*Backend)(nil)
