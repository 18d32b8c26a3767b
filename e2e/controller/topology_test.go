package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A class with topologyConstrainedPools on real Ceph: the test pool serves
// zone a, a pool made here zone b. A volume goes to its zone's pool and is
// accessible from that zone only; its restore stays in its pool; a zone
// no pool serves is ResourceExhausted.
func TestTopologyConstrainedPools(t *testing.T) {
	c := harness.LoadCluster(t)
	poolB := c.Name("rbdcsi-zone-b")
	out, err := c.Ceph("osd", "pool", "create", poolB, "8", "8")
	harness.Must(t, err, "ceph osd pool create: %s", out)
	t.Cleanup(func() {
		if out, err := c.Ceph("osd", "pool", "rm", poolB, poolB, "--yes-i-really-really-mean-it"); err != nil {
			t.Errorf("ceph osd pool rm: %v: %s", err, out)
		}
	})
	out, err = c.RBD("pool", "init", poolB)
	harness.Must(t, err, "rbd pool init: %s", out)
	// A user of both pools, as a class spanning zones needs.
	zones := c
	zones.CSIUser = c.Name("rbdcsi-zones")
	zones.CSIKey = c.NewUser(t, zones.CSIUser, "mon", "profile rbd", "osd", "profile rbd pool="+c.Pool+", profile rbd pool="+poolB)

	e := startController(t, zones)
	params := zones.Params("topologyConstrainedPools", `[{"poolName":"`+c.Pool+`","domainSegments":[{"domainLabel":"zone","value":"a"}]},
		{"poolName":"`+poolB+`","domainSegments":[{"domainLabel":"zone","value":"b"}]}]`)
	delete(params, "pool")
	zone := func(z string) *csi.Topology {
		return &csi.Topology{Segments: map[string]string{"topology.rbd.csi.rbdcsi.dev/zone": z, "topology.kubernetes.io/hostname": "n-" + z}}
	}
	create := func(name string, reqs *csi.TopologyRequirement, src *csi.VolumeContentSource) (*csi.Volume, error) {
		resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCap(),
			Parameters: params, Secrets: zones.Secrets(), AccessibilityRequirements: reqs, VolumeContentSource: src,
		})
		if err == nil {
			t.Cleanup(func() { e.delete(t, resp.Volume.VolumeId) })
		}
		return resp.GetVolume(), err
	}
	inZoneB := func(v *csi.Volume) {
		t.Helper()
		if got := strings.Split(v.VolumeId, ":")[2]; got != poolB {
			t.Errorf("volume %s is in pool %s, want %s", v.VolumeId, got, poolB)
		}
		if len(v.AccessibleTopology) != 1 || v.AccessibleTopology[0].Segments["topology.rbd.csi.rbdcsi.dev/zone"] != "b" {
			t.Errorf("volume %s is accessible from %v, want zone b", v.VolumeId, v.AccessibleTopology)
		}
		images, err := zones.RBD("ls", "-p", poolB)
		harness.Must(t, err, "rbd ls")
		if !slices.Contains(strings.Fields(images), imageOf(t, v.VolumeId)) {
			t.Errorf("image %s is not in pool %s: %s", imageOf(t, v.VolumeId), poolB, images)
		}
	}

	v, err := create("topo-b", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a"), zone("b")}, Preferred: []*csi.Topology{zone("b"), zone("a")}}, nil)
	harness.Must(t, err, "create preferring zone b")
	inZoneB(v)
	snap, err := e.snapshot(t, "topo-b-snap", v.VolumeId)
	harness.Must(t, err, "snapshot")
	defer e.deleteSnapshot(t, snap.SnapshotId)
	r, err := create("topo-restore", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a"), zone("b")}, Preferred: []*csi.Topology{zone("a")}}, fromSnapshot(snap.SnapshotId))
	harness.Must(t, err, "restore")
	inZoneB(r)
	_, err = create("topo-nowhere", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("c")}}, nil)
	wantCode(t, err, codes.ResourceExhausted, "a zone no pool serves")
}
