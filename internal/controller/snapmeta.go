package controller

import (
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/snapmeta"
)

// SnapshotMetadata returns the CSI SnapshotMetadata service on the
// controller's snapshots: read-only, so a call without secrets uses the
// controller's own credentials, as GetSnapshot does.
func (c *Controller) SnapshotMetadata() *snapmeta.Server {
	return snapmeta.New(snapmeta.Options{
		Backend: c.backend, Names: c.names,
		Pool: func(clusterID, pool string, secrets map[string]string) (rbd.Pool, error) {
			return c.pool(clusterID, pool, secrets)
		},
	})
}
