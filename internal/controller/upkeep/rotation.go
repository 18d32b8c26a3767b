package upkeep

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// KEK rotation, with no node involved. An admin rotates a KMS's KEK by
// adding the new KEK to the Secret and pointing <prefix>Current at it (for
// a KMIP KMS: by creating a key in the KMIP server and naming it keyID in
// the KMS configuration, which the controller reads at start). A
// pass over every pool the controller's credentials read then re-wraps,
// with the KEKs of the controller's own Secret (Options.KMSSecrets), each
// DEK wrapped by another KEK than its KMS's current one, or by an older
// release that did not bind it to its image (kms.Binding): volumes, and the
// hidden images of deleted volumes, whose records restores from their
// snapshots use. Only the wrapped DEK changes (one metadata key, written
// in one step): the LUKS header and the data stay as they are, mapped
// volumes stay mapped, and a re-wrap that fails leaves the old wrapping,
// which the old KEK still opens, for the next pass. The old KEK can go
// once the pending count (Observer.RotationPassed) is 0 for its KMS.

// rotationTimeout bounds one pass.
const rotationTimeout = time.Hour

// rotationKey names the pass among the tasks of its background.
const rotationKey = "kek-rotation"

// unknownKMSLabel stands for the KMS ID of a record that is malformed or
// names a KMS the configuration lacks: no label of its own for that.
const unknownKMSLabel = "unknown"

// rotation runs the periodic re-wrap pass.
type rotation struct {
	*env
	interval time.Duration
	tasks    *background
}

// newRotation returns the rotation, or nil when the controller cannot
// rotate: no KMS configuration, no secrets of its own, or no credentials
// of its own to list pools with.
func newRotation(e *env) *rotation {
	o := e.o
	if o.KMS == nil || o.KMSSecrets == nil || o.Credentials == nil {
		return nil
	}
	interval := o.KEKRotationInterval
	if interval <= 0 {
		interval = DefaultKEKRotationInterval
	}
	return &rotation{env: e, interval: interval, tasks: newBackground()}
}

// start runs a pass once per interval, the first one interval from now.
func (r *rotation) start() {
	if r == nil {
		return
	}
	r.tasks.every(rotationKey, r.interval, func(ctx context.Context) {
		up := r.o.Observer
		up.BackgroundTasks(rotationKey, 1)
		pctx, cancel := context.WithTimeout(ctx, rotationTimeout)
		pending, err := r.pass(pctx)
		cancel()
		up.BackgroundTasks(rotationKey, -1)
		if err != nil {
			klog.ErrorS(err, "KEK rotation pass; the next pass tries again", "pending", pending)
		}
		up.RotationPassed(pending, err)
	})
}

func (r *rotation) stop() {
	if r != nil {
		r.tasks.stop()
	}
}

// rotationPass is the state of one pass: the KMSs opened with the
// controller's secrets, and per KMS ID the volumes still wrapped by
// another KEK than the current one.
type rotationPass struct {
	r        *rotation
	secrets  map[string]string
	keys     map[string]kms.Keys
	kmsErrs  map[string]error
	pending  map[string]int
	failures int
}

// pass re-wraps every stale DEK in every pool, and returns per KMS ID
// the volumes left stale; err is why part of the work could not be done.
func (r *rotation) pass(ctx context.Context) (map[string]int, error) {
	p := &rotationPass{r: r, keys: map[string]kms.Keys{}, kmsErrs: map[string]error{}, pending: map[string]int{}}
	for id := range r.o.KMS {
		p.pending[id] = 0
	}
	var err error
	if p.secrets, err = r.o.KMSSecrets(); err != nil {
		return nil, fmt.Errorf("the controller's secrets: %w", err)
	}
	var errs []error
	for _, cl := range r.o.Clusters.All() {
		pools, err := r.ownPools(ctx, cl)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: listing pools: %w", cl.ClusterID, err))
			continue
		}
		for _, pool := range pools {
			if err := p.pool(ctx, pool); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s, pool %s: %w", cl.ClusterID, pool.Name, err))
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.kmsErrs)) {
		errs = append(errs, p.kmsErrs[id])
	}
	if p.failures > 0 {
		errs = append(errs, fmt.Errorf("%d data keys could not be re-wrapped; they keep their old wrapping (see the log)", p.failures))
	}
	return p.pending, errors.Join(errs...)
}

// pool re-wraps the stale DEKs of the pool's volume and hidden images.
func (p *rotationPass) pool(ctx context.Context, pool rbd.Pool) error {
	e := p.r.env
	names, _, err := e.ownImages(ctx, pool)
	if err != nil {
		return err
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, hidden := e.names.HiddenID(name)
		if err := p.image(ctx, pool, name, hidden); err != nil {
			return err
		}
	}
	return nil
}

// image re-wraps one image's DEK if it is stale. A first look goes
// without the image's key: a pass that finds nothing to do (the usual
// case) must not make requests on the volume fail with Aborted. A stale
// DEK is read again under the key and written before it is released, so
// that no new volume of the same name (CreateVolume holds the key too)
// gets the old one's DEK. Only errors that concern the pool are returned;
// a volume's own failure is reported.
func (p *rotationPass) image(ctx context.Context, pool rbd.Pool, name string, hidden bool) error {
	if stale, err := p.stale(ctx, pool, name, hidden); err != nil || stale == nil {
		return err
	}
	e := p.r.env
	release, ok := e.locks.TryLock(records.ImageLock(pool, name))
	if !ok {
		return nil // a request is on it; the next pass comes back
	}
	defer release()
	stale, err := p.stale(ctx, pool, name, hidden)
	if err != nil || stale == nil {
		return err
	}
	key, keys := stale.key, stale.keys
	wrapped, err := rewrap(ctx, keys, key.DEK, stale.binding)
	if err == nil {
		err = e.backend.SetMetadata(ctx, pool, name, map[string]string{kms.MetaDEK: string(wrapped)})
		if errors.Is(err, rbd.ErrNotFound) {
			return nil
		}
	}
	if err != nil {
		p.failed(pool, name, key.KMSID, err)
		if errors.Is(err, kms.ErrUnavailable) {
			// Each of the KMS's other volumes would wait for it as
			// well: they are left for the next pass.
			delete(p.keys, key.KMSID)
			p.kmsErrs[key.KMSID] = fmt.Errorf("%w; its volumes are left for the next pass", err)
		}
		return nil
	}
	klog.V(2).InfoS("re-wrapped the data key of an encrypted volume", "pool", pool.Name, "image", name, "kms", key.KMSID, "from", key.DEK.KEKID(), "to", keys.Current())
	e.o.Observer.Rewrapped(key.KMSID, nil)
	return nil
}

// staleKey is a volume's DEK wrapped by a KEK that is not its KMS's
// current one, or not bound to its image (a legacy wrap), with that KMS's
// keys and the image's binding.
type staleKey struct {
	key     kms.VolumeKey
	keys    kms.Keys
	binding kms.Binding
}

// stale reads an image's DEK and tells whether it needs a re-wrap (nil:
// no, or it cannot be done now, which is counted).
func (p *rotationPass) stale(ctx context.Context, pool rbd.Pool, name string, hidden bool) (*staleKey, error) {
	e := p.r.env
	info, err := e.backend.Stat(ctx, pool, name)
	if errors.Is(err, rbd.ErrNotFound) {
		return nil, nil // deleted or renamed meanwhile
	}
	if err != nil {
		return nil, err
	}
	v := e.names.Volume(name, info.Metadata)
	if !hidden && !v.Finished() {
		return nil, nil // a crash's leftover, never handed out: the sweep removes it
	}
	key, encrypted, err := v.Key()
	switch {
	case !encrypted:
		return nil, nil
	case err != nil:
		p.failed(pool, name, unknownKMSLabel, err)
		return nil, nil
	}
	if err := e.o.KMS.Known(key.KMSID); err != nil {
		p.failed(pool, name, unknownKMSLabel, err)
		return nil, nil
	}
	keys, ok := p.open(key.KMSID)
	if !ok {
		p.pending[key.KMSID]++
		return nil, nil
	}
	if key.DEK.KEKID() == keys.Current() && key.DEK.Bound() {
		return nil, nil
	}
	// A hidden image keeps the binding of the volume it came from.
	b := kms.Binding{KMSID: key.KMSID, Pool: pool.Name, Namespace: pool.Namespace, Image: e.names.OriginalImage(v)}
	return &staleKey{key: key, keys: keys, binding: b}, nil
}

// failed reports a volume whose DEK stays as it was.
func (p *rotationPass) failed(pool rbd.Pool, name, kmsID string, err error) {
	klog.ErrorS(err, "re-wrapping the data key of an encrypted volume; it keeps its old wrapping, and the next pass tries again", "pool", pool.Name, "image", name, "kms", kmsID)
	p.pending[kmsID]++
	p.failures++
	p.r.o.Observer.Rewrapped(kmsID, err)
}

// open opens a configured KMS with the controller's secrets, once per
// pass. One whose KEKs the secrets lack is an error of the pass (once),
// and its volumes are left as they are.
func (p *rotationPass) open(id string) (kms.Keys, bool) {
	if k, ok := p.keys[id]; ok {
		return k, true
	}
	if _, failed := p.kmsErrs[id]; failed {
		return nil, false
	}
	keys, err := p.r.o.KMS.Open(id, p.secrets)
	if err == nil && keys.Current() == "" {
		err = fmt.Errorf("KMS %s: the controller's secret (--controller-secret-dir) holds none of its KEKs, so its volumes are not re-wrapped", id)
	}
	if err != nil {
		p.kmsErrs[id] = err
		return nil, false
	}
	p.keys[id] = keys
	return keys, true
}

// rewrap unwraps w and wraps its DEK with the current KEK, bound to b, and
// checks that the new wrap opens to the same DEK before anyone may store it.
func rewrap(ctx context.Context, keys kms.Keys, w kms.Wrapped, b kms.Binding) (kms.Wrapped, error) {
	dek, err := keys.Unwrap(ctx, w, b)
	if err != nil {
		return "", err
	}
	defer clear(dek)
	nw, err := keys.Wrap(ctx, dek, b)
	if err != nil {
		return "", err
	}
	check, err := keys.Unwrap(ctx, nw, b)
	if err != nil {
		return "", fmt.Errorf("the new wrap does not open: %w", err)
	}
	defer clear(check)
	if subtle.ConstantTimeCompare(check, dek) != 1 {
		return "", errors.New("the new wrap opens to another data key")
	}
	return nw, nil
}
