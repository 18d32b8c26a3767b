package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A pool at its quota makes Ceph hold writes; the driver reports that as
// ResourceExhausted, not as an outage.
func TestFullPoolIsResourceExhausted(t *testing.T) {
	c := harness.LoadCluster(t)
	c.NeedsWholeCluster(t) // a quota on the pool
	p := harness.StartPlugin(t, c, "--mode", "controller", "--ceph-timeout", "3s", "--controller-secret-dir", harness.WriteControllerSecretDir(t, c))
	e := env{c: c, p: p, cc: p.Controller()}
	t.Cleanup(func() { c.ExpectNoImages(t) })
	v := e.mustCreate(t, "full-existing", 8*mib)

	filler := c.Pool + "/quota-filler"
	if out, err := c.RBD("create", "--size", "64", filler); err != nil {
		t.Fatalf("rbd create: %v: %s", err, out)
	}
	defer func() {
		if out, err := c.RBD("rm", "--no-progress", filler); err != nil {
			t.Errorf("rbd rm: %v: %s", err, out)
		}
	}()
	if out, err := c.RBD("bench", "--io-type", "write", "--io-size", "1M", "--io-total", "16M", filler); err != nil {
		t.Fatalf("rbd bench: %v: %s", err, out)
	}
	if out, err := c.Ceph("osd", "pool", "set-quota", c.Pool, "max_bytes", "8000000"); err != nil {
		t.Fatalf("set-quota: %v: %s", err, out)
	}
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			c.CephRepair(t, "osd", "pool", "set-quota", c.Pool, "max_bytes", "0")
			c.WaitHealth(t, "no full pool", func(h string) bool { return !strings.Contains(h, "full") })
		}
	}
	defer lift()
	c.WaitHealth(t, "a full pool", func(h string) bool { return strings.Contains(h, "full") })
	// The volume's health says so, and where to act.
	wantHealth(t, e, v.VolumeId, "INACCESSIBLE PoolFull")

	_, err := e.create(t, "full-new", 8*mib)
	wantCode(t, err, codes.ResourceExhausted, "CreateVolume on a full pool")
	_, err = e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib}, Secrets: c.Secrets()})
	wantCode(t, err, codes.ResourceExhausted, "expand on a full pool")
	list, err := e.cc.ControllerListVolumeHealth(harness.Ctx(t), &csi.ControllerListVolumeHealthRequest{})
	harness.Must(t, err, "ControllerListVolumeHealth")
	if !slices.ContainsFunc(list.GetEntries(), func(h *csi.VolumeHealth) bool { return h.GetVolumeId() == v.VolumeId }) {
		t.Errorf("ControllerListVolumeHealth on a full pool: %v, want volume %s listed", list.GetEntries(), v.VolumeId)
	}
	// Repaired, the condition goes.
	lift()
	wantHealth(t, e, v.VolumeId)
}
