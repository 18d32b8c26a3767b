package addons_test

import (
	"context"
	"strings"
	"testing"

	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// The controller's reclaim sparsifies a detached volume and reports its
// usage before and after; an attached or open one it leaves to the
// node's trim, usage unchanged; a mirrored secondary it refuses, since a
// sparsify writes. e2e/addons proves the usage falls on real Ceph.
func TestControllerReclaimSpace(t *testing.T) {
	e := newEnv(t, addons.Options{})
	rs := addons.New(addons.Options{Backend: e.ceph, Clusters: e.clusters(), Locks: e.locks, Names: e.names()}).Reclaim()
	reclaim := func(id string, sec map[string]string) (*reclaimspace.ControllerReclaimSpaceResponse, error) {
		return rs.ControllerReclaimSpace(ctx(t), &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id, Secrets: sec, Parameters: map[string]string{"clusterID": clusterID, "pool": poolName}})
	}
	id := e.volume("vol")
	must(t, e.ceph.WriteAt(ctx(t), e.pool, "vol", 0, make([]byte, mib)), "WriteAt")
	resp, err := reclaim(id, secrets())
	must(t, err, "ControllerReclaimSpace")
	if resp.GetPreUsage().GetUsageBytes() != mib || resp.GetPostUsage() == nil || e.ceph.Sparsified(e.pool, "vol") != 1 {
		t.Fatalf("reclaim of a detached volume: %v, sparsified %d times; want usage %d before, sparsified once", resp, e.ceph.Sparsified(e.pool, "vol"), mib)
	}

	must(t, e.ceph.SetMetadata(ctx(t), e.pool, "vol", map[string]string{attach.MetaPrefix + "node-1": "rw:SINGLE_NODE_WRITER"}), "attach")
	resp, err = reclaim(id, secrets())
	must(t, err, "ControllerReclaimSpace of an attached volume")
	if e.ceph.Sparsified(e.pool, "vol") != 1 || resp.GetPreUsage().GetUsageBytes() != resp.GetPostUsage().GetUsageBytes() {
		t.Fatalf("an attached volume was sparsified (%d) or its usage changed: %v", e.ceph.Sparsified(e.pool, "vol"), resp)
	}
	must(t, e.ceph.RemoveMetadata(ctx(t), e.pool, "vol", attach.MetaPrefix+"node-1"), "detach")
	unwatch, err := e.ceph.Watch(e.pool, "vol")
	must(t, err, "Watch")
	_, err = reclaim(id, secrets())
	must(t, err, "ControllerReclaimSpace of an open volume")
	unwatch()
	if e.ceph.Sparsified(e.pool, "vol") != 1 {
		t.Fatalf("an open volume was sparsified")
	}

	sec := e.mirrored("secondary")
	must(t, e.ceph.MakeNonPrimary(e.pool, "secondary", false), "MakeNonPrimary")
	_, err = reclaim(sec, secrets())
	wantCode(t, err, codes.FailedPrecondition, "reclaim of a non-primary copy")
	if e.ceph.Sparsified(e.pool, "secondary") != 0 {
		t.Fatal("a non-primary copy was sparsified")
	}

	for _, c := range []struct {
		what string
		id   string
		sec  map[string]string
		code codes.Code
	}{
		{"no volume_id", "", secrets(), codes.InvalidArgument},
		{"a malformed volume_id", "not-an-id", secrets(), codes.NotFound},
		{"a missing image", volid.Volume{ClusterID: clusterID, Pool: poolName, Image: "gone"}.String(), secrets(), codes.NotFound},
		{"an unknown cluster", volid.Volume{ClusterID: "elsewhere", Pool: poolName, Image: "vol"}.String(), secrets(), codes.InvalidArgument},
		{"no secrets and no credentials of its own", id, nil, codes.InvalidArgument},
		{"a secret without a key", id, map[string]string{"userID": "csi"}, codes.InvalidArgument},
	} {
		_, err := reclaim(c.id, c.sec)
		wantCode(t, err, c.code, c.what)
	}
	release, _ := e.locks.TryLock("vol/" + id)
	_, err = reclaim(id, secrets())
	release()
	wantCode(t, err, codes.Aborted, "reclaim while another call holds the volume")
}

// The node's reclaim passes the volume and its staging path to the
// node's trim and its answer back; the request must name the volume.
func TestNodeReclaimSpace(t *testing.T) {
	var gotID, gotPath string
	fail := error(nil)
	nr := addons.New(addons.Options{NodeTrim: func(_ context.Context, id, path string) error {
		gotID, gotPath = id, path
		return fail
	}}).NodeReclaim()
	req := &reclaimspace.NodeReclaimSpaceRequest{VolumeId: "v1:c:p:i", VolumePath: "/pods/x/mount", StagingTargetPath: "/staging/x"}
	resp, err := nr.NodeReclaimSpace(ctx(t), req)
	if err != nil || resp == nil || gotID != "v1:c:p:i" || gotPath != "/staging/x" {
		t.Fatalf("NodeReclaimSpace = %v, %v; trim got %q %q", resp, err, gotID, gotPath)
	}
	fail = status.Error(codes.FailedPrecondition, "mapped with rbd-fuse")
	_, err = nr.NodeReclaimSpace(ctx(t), req)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rbd-fuse") {
		t.Fatalf("the trim's refusal came back as %v", err)
	}
	_, err = nr.NodeReclaimSpace(ctx(t), &reclaimspace.NodeReclaimSpaceRequest{VolumePath: "/p"})
	wantCode(t, err, codes.InvalidArgument, "no volume_id")
	_, err = nr.NodeReclaimSpace(ctx(t), &reclaimspace.NodeReclaimSpaceRequest{VolumeId: "v1:c:p:i"})
	wantCode(t, err, codes.InvalidArgument, "no volume_path")
}

func (e *env) clusters() addons.Clusters {
	return cluster.NewStaticMap([]cluster.Cluster{{ClusterID: clusterID, Monitors: []string{"127.0.0.1:3300"}}})
}

func (e *env) names() records.Names { return records.NewNames("", nil) }
