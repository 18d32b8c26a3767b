package addons

import (
	"context"
	"fmt"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// setSchedule makes the image's own mirror snapshot schedules the class's
// one, or none: image-level schedules are the driver's, an admin's go on
// the pool. The mgr keys them by RBD image ID, so each site's copy has
// its own, and Enable and Promote both set them: the copy that becomes
// primary on the other site takes snapshots from then on. Repeated, it
// changes nothing.
func (r *Replication) setSchedule(ctx context.Context, v volume, want *rbd.MirrorSchedule) error {
	have, err := r.o.Backend.MirrorSchedules(ctx, v.pool, v.image())
	if err != nil {
		return fmt.Errorf("reading the mirror snapshot schedules: %w", err)
	}
	found := false
	for _, s := range have {
		if want != nil && s.Normal() == want.Normal() {
			found = true
			continue
		}
		if err := r.o.Backend.RemoveMirrorSchedule(ctx, v.pool, v.image(), s); err != nil {
			return fmt.Errorf("removing mirror snapshot schedule %s: %w", s, err)
		}
	}
	if want == nil || found {
		return nil
	}
	if err := r.o.Backend.AddMirrorSchedule(ctx, v.pool, v.image(), *want); err != nil {
		return fmt.Errorf("adding mirror snapshot schedule %s: %w", want, err)
	}
	return nil
}
