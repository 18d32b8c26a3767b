package controller_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

const driverName = "rbd.csi.rbdcsi.dev"

func zone(z string) *csi.Topology {
	return &csi.Topology{Segments: map[string]string{"topology." + driverName + "/zone": z, "topology." + driverName + "/rack": "r1"}}
}

// A class with topologyConstrainedPools puts a volume in the first pool
// serving a preferred topology, then a requisite one, and says where it is
// accessible; restores and clones stay in their source's pool; what cannot
// be placed is refused with the reason.
func TestTopologyPlacement(t *testing.T) {
	e := &env{t: t, ceph: fake.New(fake.Options{Pools: []string{"pool-a", "pool-b", "pool-c"}}), pool: rbd.Pool{Name: "pool-a"}}
	c := e.start("", controller.Options{DriverName: driverName})
	pools := `[{"poolName":"pool-a","domainSegments":[{"domainLabel":"zone","value":"a"}]},
		{"poolName":"pool-b","domainSegments":[{"domainLabel":"zone","value":"b"}]}]`
	create := func(name string, reqs *csi.TopologyRequirement, src *csi.VolumeContentSource, extra ...string) (*csi.Volume, error) {
		params := map[string]string{"clusterID": clusterID, "topologyConstrainedPools": pools}
		for i := 0; i+1 < len(extra); i += 2 {
			params[extra[i]] = extra[i+1]
		}
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
			Parameters: params, Secrets: secrets(), AccessibilityRequirements: reqs, VolumeContentSource: src,
		})
		if err == nil {
			t.Cleanup(func() { c.delete(t, resp.Volume.VolumeId) })
		}
		return resp.GetVolume(), err
	}
	placedIn := func(v *csi.Volume, pool, z string) {
		t.Helper()
		id, err := volid.DecodeVolume(v.GetVolumeId())
		must(t, err, "DecodeVolume")
		if id.Pool != pool || v.VolumeContext["pool"] != pool {
			t.Errorf("volume %s is in pool %s (context %v), want %s", v.VolumeId, id.Pool, v.VolumeContext, pool)
		}
		want := "topology." + driverName + "/zone"
		if len(v.AccessibleTopology) != 1 || len(v.AccessibleTopology[0].Segments) != 1 || v.AccessibleTopology[0].Segments[want] != z {
			t.Errorf("volume %s is accessible from %v, want %s=%s", v.VolumeId, v.AccessibleTopology, want, z)
		}
	}
	wantCode := func(err error, code codes.Code, what string) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v, want %v", what, err, code)
		}
	}

	first, err := create("preferred", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a"), zone("b")}, Preferred: []*csi.Topology{zone("b")}}, nil)
	must(t, err, "create with a preferred zone")
	placedIn(first, "pool-b", "b")
	v, err := create("requisite", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("x"), zone("a")}}, nil)
	must(t, err, "create with requisite zones only")
	placedIn(v, "pool-a", "a")

	// A retry that prefers another zone finds the volume where it is.
	again, err := create("preferred", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a"), zone("b")}, Preferred: []*csi.Topology{zone("a")}}, nil)
	must(t, err, "retry with another preference")
	if again.VolumeId != first.VolumeId {
		t.Errorf("the retry made %s, the first attempt %s", again.VolumeId, first.VolumeId)
	}
	placedIn(again, "pool-b", "b")
	_, err = create("preferred", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a")}}, nil)
	wantCode(err, codes.AlreadyExists, "a retry that requires a zone the volume is not in")

	_, err = create("nowhere", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("x")}}, nil)
	wantCode(err, codes.ResourceExhausted, "no pool serves the zone")
	_, err = create("no-topology", nil, nil)
	wantCode(err, codes.InvalidArgument, "no topology and no pool")
	v, err = create("no-topology", nil, nil, "pool", "pool-c")
	must(t, err, "no topology, a pool for that")
	if id, _ := volid.DecodeVolume(v.VolumeId); id.Pool != "pool-c" || len(v.AccessibleTopology) != 0 {
		t.Errorf("without topology: pool %s, accessible %v; want pool-c, everywhere", id.Pool, v.AccessibleTopology)
	}

	// Restores and clones stay in their source's pool.
	src, err := create("source", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("b")}}, nil)
	must(t, err, "source")
	snap := c.mustSnapshot(t, "source-snap", src.VolumeId)
	t.Cleanup(func() { c.deleteSnapshot(t, snap) })
	v, err = create("restore", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a"), zone("b")}, Preferred: []*csi.Topology{zone("a")}}, fromSnapshot(snap))
	must(t, err, "restore")
	placedIn(v, "pool-b", "b")
	v, err = create("clone", nil, fromVolume(src.VolumeId))
	must(t, err, "clone without topology")
	placedIn(v, "pool-b", "b")
	_, err = create("restore-elsewhere", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("a")}}, fromSnapshot(snap))
	wantCode(err, codes.ResourceExhausted, "a restore whose source's pool is outside the required zone")
	_, err = create("restore-foreign", nil, fromSnapshot(snap), "topologyConstrainedPools", `[{"poolName":"pool-a","domainSegments":[{"domainLabel":"zone","value":"a"}]}]`)
	wantCode(err, codes.InvalidArgument, "a restore from a pool the class does not list")
	_, err = create("restore-garbage", nil, fromSnapshot("not-an-id"))
	wantCode(err, codes.NotFound, "a restore from a malformed snapshot ID")
}
