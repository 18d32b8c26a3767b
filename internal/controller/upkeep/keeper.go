package upkeep

import (
	"context"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Keeper runs the upkeep of one controller.
type Keeper struct {
	env     *env
	sweeper *sweeper
	// flattens and sparsifies run per image, keyed by records.PoolImageKey.
	flattens, sparsifies *background
	// rotation re-wraps data keys after a KEK rotation (nil: none).
	rotation *rotation
}

// New starts the upkeep: the periodic sweep and KEK rotation, where the
// options allow them, with the sweep steps of the controller's own
// features (group snapshots, temporary snapshots of static images,
// snapshot claims).
func New(o Options) *Keeper {
	e := newEnv(o)
	k := &Keeper{env: e, sweeper: newSweeper(e, o.SweepInterval), flattens: newBackground(), sparsifies: newBackground()}
	k.Register(groupStep(k.sweeper), staticTmpStep(k.sweeper), claimStep(k.sweeper))
	k.sweeper.startPeriodic()
	k.rotation = newRotation(e)
	k.rotation.start()
	return k
}

// Register adds a feature's steps to every sweep from now on, after those
// registered before.
func (k *Keeper) Register(steps ...Step) { k.sweeper.register(steps...) }

// Close stops the work (flattens in flight are abandoned; a later
// CreateVolume on the same chain starts them again; a sweep cut short is
// run again after the next delete or periodic pass).
func (k *Keeper) Close() {
	k.flattens.stop()
	k.sweeper.stop()
	k.sparsifies.stop()
	k.rotation.stop()
}

// Touch forgets that the sweep found an image clean: a request is
// changing it.
func (k *Keeper) Touch(pool rbd.Pool, image string) { k.sweeper.touch(pool, image) }

// After is called when a delete in the pool succeeded: it starts a sweep
// of the pool unless one ran within the interval or is running.
func (k *Keeper) After(pool rbd.Pool) { k.sweeper.after(pool) }

// Reclaim removes a hidden image once nothing depends on it any more, and
// walks on to its parent, which may have been waiting for it.
func (k *Keeper) Reclaim(ctx context.Context, pool rbd.Pool, imageID string) error {
	return k.env.reclaim(ctx, pool, imageID)
}

// ReclaimFrom is Reclaim of an image whose family the caller has read.
func (k *Keeper) ReclaimFrom(ctx context.Context, pool rbd.Pool, fam *rbd.Family) error {
	return k.env.reclaimFrom(ctx, pool, fam)
}

// FinishGroup runs the last step of a recorded group snapshot (groups.go).
func (k *Keeper) FinishGroup(ctx context.Context, pool rbd.Pool, group string, rec records.GroupRecord) error {
	return k.env.finishGroup(ctx, pool, group, rec)
}

// RollbackGroup undoes an unrecorded group snapshot (groups.go).
func (k *Keeper) RollbackGroup(ctx context.Context, pool rbd.Pool, group string) error {
	return k.env.rollbackGroup(ctx, pool, group)
}
