package controller

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// A call Ceph refuses is PermissionDenied, and its message names the
// Secret's user, what Ceph refused it on and the caps docs/install.md
// gives, never the key: a user whose caps cover no pool, one that may only
// read the pool (refused once it writes), one the monitors do not know
// and one with a key that is not its own. Nothing is made or changed. Each
// call has a deadline of its own, so one that hangs fails alone.
func TestRefusalsNameTheUserAndCaps(t *testing.T) {
	e := setup(t)
	where := "pool=" + e.c.Pool
	if e.c.Namespace != "" {
		where += " namespace=" + e.c.Namespace
	}
	poolless := e.c.Name("rbdcsi-e2e-poolless")
	reader := e.c.Name("rbdcsi-e2e-reader")
	users := map[string]string{
		// Caps on another pool: with no osd caps at all, Reef's and
		// Tentacle's OSDs do not answer (the call times out, as in an
		// outage); only Pacific's refuse.
		poolless: e.c.NewUser(t, poolless, "mon", "profile rbd", "osd", "profile rbd pool=rbdcsi-no-such-pool"),
		reader:   e.c.NewUser(t, reader, "mon", "profile rbd", "osd", "profile rbd-read-only "+where),
	}
	secrets := func(id, key string) map[string]string { return map[string]string{"userID": id, "userKey": key} }
	osd := cluster.CapRBD(e.c.Namespace, e.c.Pool)
	on := "Ceph refused client.%s on " + cluster.OnPool(e.c.Namespace, e.c.Pool) + ":"
	refused := func(err error, what, id, key string, want ...string) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", what, err)
			return
		}
		for _, w := range append(want, cluster.CapsDoc) {
			if !strings.Contains(err.Error(), strings.ReplaceAll(w, "%s", id)) {
				t.Errorf("%s: %q does not say %q", what, err, strings.ReplaceAll(w, "%s", id))
			}
		}
		for _, k := range []string{key, e.c.CSIKey} {
			if strings.Contains(err.Error(), k) {
				t.Errorf("%s: the error shows a key", what)
			}
		}
	}
	create := func(name string, s map[string]string, src *csi.VolumeContentSource) error {
		_, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib},
			VolumeCapabilities: fsCap(), Parameters: e.c.Params(), Secrets: s, VolumeContentSource: src})
		return err
	}

	const wrongKey = "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="
	monitors := "the Ceph monitors " + e.c.MonHost + " refused client.%s"
	for id, key := range map[string]string{e.c.CSIUser: wrongKey, e.c.Name("rbdcsi-e2e-nobody"): wrongKey} {
		refused(create("refused", secrets(id, key), nil), "CreateVolume as "+id+" with a key not its own", id, key, monitors, "userKey")
	}
	refused(create("refused", secrets(poolless, users[poolless]), nil), "CreateVolume without osd caps", poolless, users[poolless], on, osd)

	v := e.mustCreate(t, "refusals", 8*mib).VolumeId
	snap, err := e.snapshot(t, "refusals", v)
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() { e.deleteSnapshot(t, snap.SnapshotId) })
	for _, id := range []string{poolless, reader} {
		s := secrets(id, users[id])
		refused(create("refused-clone", s, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v}}}),
			"clone as "+id, id, users[id], on, osd)
		refused(create("refused-restore", s, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.SnapshotId}}}),
			"restore as "+id, id, users[id], on, osd)
		_, err := e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: v, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 * mib}, Secrets: s})
		refused(err, "expand as "+id, id, users[id], on, osd)
		_, err = e.cc.CreateSnapshot(harness.Ctx(t), &csi.CreateSnapshotRequest{Name: "refused", SourceVolumeId: v, Secrets: s})
		refused(err, "snapshot as "+id, id, users[id], on, osd)
		_, err = e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId, Secrets: s})
		refused(err, "delete the snapshot as "+id, id, users[id], on, osd)
		_, err = e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: v, Secrets: s})
		refused(err, "delete as "+id, id, users[id], on, osd)
	}
	images := e.c.Images(t)
	if len(images) != 1 || images[0] != imageOf(t, v) {
		t.Errorf("after the refused calls the pool holds %v, want only %s", images, imageOf(t, v))
	}
	out, err := e.c.RBD(append(append([]string{"snap", "ls", "--format", "json", "--pool", e.c.Pool}, e.c.NamespaceArgs()...), "--image", imageOf(t, v))...)
	harness.Must(t, err, "rbd snap ls: %s", out)
	if n := strings.Count(out, `"name"`); n != 1 {
		t.Errorf("after the refused calls the volume has %d snapshots, want one: %s", n, out)
	}
}
