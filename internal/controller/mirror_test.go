package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A non-primary mirror copy gives no snapshot, restore or clone until it
// is promoted, and is not deleted (FailedPrecondition, nothing made or
// changed); a snapshot taken while it was primary stays what a retry of
// its CreateSnapshot returns; once promoted, the copy serves them all
// again.
func TestNonPrimaryCopyRefusesSnapshotsAndClones(t *testing.T) {
	e := newEnv(t)
	e.ceph.SetPoolMirrorMode(poolName, "image")
	c := e.start("", controller.Options{})
	vol := c.mustCreate(t, "mirrored", nil)
	must(t, c.ceph.EnableMirroring(ctx(t), e.pool, imageOf(t, vol)), "EnableMirroring")
	before := c.mustSnapshot(t, "before", vol)
	must(t, e.ceph.MakeNonPrimary(e.pool, imageOf(t, vol), false), "MakeNonPrimary")
	images, snaps, _ := e.ceph.Contents(e.pool)

	_, err := c.snapshot(t, "after", vol)
	wantCode(t, err, codes.FailedPrecondition, "CreateSnapshot of a non-primary copy")
	_, err = c.createFrom(t, "clone", fromVolume(vol))
	wantCode(t, err, codes.FailedPrecondition, "a clone of a non-primary copy")
	_, err = c.createFrom(t, "restore", fromSnapshot(before))
	wantCode(t, err, codes.FailedPrecondition, "a restore from a snapshot of a non-primary copy")
	if again, err := c.snapshot(t, "before", vol); err != nil || again != before {
		t.Fatalf("a retry of a snapshot taken while primary: %q %v, want %q", again, err, before)
	}
	afterImages, afterSnaps, _ := e.ceph.Contents(e.pool)
	if len(afterImages) != len(images) || len(afterSnaps) != len(snaps) {
		t.Fatalf("refusals changed the pool: images %v -> %v, snapshots %v -> %v", images, afterImages, snaps, afterSnaps)
	}

	wantCode(t, c.deleteVolume(ctx(t), vol), codes.FailedPrecondition, "DeleteVolume of a non-primary copy")
	if images, _, _ := e.ceph.Contents(e.pool); len(images) != len(afterImages) {
		t.Fatalf("a refused delete changed the pool: %v", images)
	}

	must(t, c.ceph.PromoteImage(ctx(t), e.pool, imageOf(t, vol), true), "PromoteImage")
	c.mustSnapshot(t, "after", vol)
	c.mustCreate(t, "clone", fromVolume(vol))
	c.mustCreate(t, "restore", fromSnapshot(before))
}

// On a mirror site, a volume's ID carries the clusterID of the site that
// made it, which the cluster map resolves to this site's cluster: its
// snapshots, restores and clones are in the StorageClass's cluster, not
// refused as another cluster's. A clusterID the map does not name is.
func TestSourcesOfAPeersVolumeID(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	img := imageOf(t, c.mustCreate(t, "made-on-the-peer", nil))
	asPeer := volid.Volume{ClusterID: peerClusterID, Pool: poolName, Image: img}.String()
	snap := c.mustSnapshot(t, "of-the-copy", asPeer)
	if s, err := volid.DecodeSnapshot(snap); err != nil || s.ClusterID != peerClusterID {
		t.Fatalf("snapshot ID %q (%v): want it to keep the volume's clusterID", snap, err)
	}
	c.mustCreate(t, "restore", fromSnapshot(snap))
	c.mustCreate(t, "clone", fromVolume(asPeer))
	other := volid.Volume{ClusterID: "elsewhere", Pool: poolName, Image: img}.String()
	_, err := c.createFrom(t, "clone-elsewhere", fromVolume(other))
	wantCode(t, err, codes.InvalidArgument, "a clone of a volume of a cluster not in the map")
}
