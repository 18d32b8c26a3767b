package controller_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// A sparsify request (a mutable parameter) runs once per value on a
// detached, closed volume: Aborted until done, FailedPrecondition while
// attached or open, a no-op for a value already done; CreateVolume takes
// and ignores it.
func TestSparsifyOnRequest(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	id := c.mustCreate(t, "sparse", nil)
	image := imageOf(t, id)
	modify := func(params map[string]string) error {
		_, err := c.c.ControllerModifyVolume(ctx(t), &csi.ControllerModifyVolumeRequest{VolumeId: id, Secrets: secrets(), MutableParameters: params})
		return err
	}
	code := func(err error, want codes.Code, what string) {
		t.Helper()
		if status.Code(err) != want {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	done := func(request string) {
		t.Helper()
		code(modify(map[string]string{"sparsify": request}), codes.Aborted, "a new request "+request)
		waitFor(t, "the sparsify "+request+" to finish", func() bool { return modify(map[string]string{"sparsify": request}) == nil })
	}

	done("2026-11-25")
	if n := e.ceph.Sparsified(e.pool, image); n != 1 {
		t.Fatalf("sparsified %d times, want 1", n)
	}
	must(t, modify(map[string]string{"sparsify": "2026-11-25", "maxIops": "100"}), "the same request beside a QoS change")
	if n := e.ceph.Sparsified(e.pool, image); n != 1 {
		t.Fatalf("the same request ran again: %d runs", n)
	}
	// The class's parameters again change nothing, so nothing is written:
	// the call succeeds on a full pool, where every write waits.
	e.ceph.SetFull(poolName, true)
	must(t, modify(map[string]string{"sparsify": "2026-11-25", "maxIops": "100"}), "the same parameters again, on a full pool")
	e.ceph.SetFull(poolName, false)

	must(t, e.ceph.SetMetadata(ctx(t), e.pool, image, map[string]string{attach.MetaPrefix + "node-a": "rw:SINGLE_NODE_WRITER"}), "attach record")
	code(modify(map[string]string{"sparsify": "again"}), codes.FailedPrecondition, "attached")
	must(t, e.ceph.RemoveMetadata(ctx(t), e.pool, image, attach.MetaPrefix+"node-a"), "detach")
	unwatch, err := e.ceph.Watch(e.pool, image)
	must(t, err, "watch")
	code(modify(map[string]string{"sparsify": "again"}), codes.FailedPrecondition, "open by a client")
	unwatch()
	done("again")
	if n := e.ceph.Sparsified(e.pool, image); n != 2 {
		t.Fatalf("sparsified %d times, want 2", n)
	}

	code(modify(map[string]string{"sparsify": "a b"}), codes.InvalidArgument, "a malformed request")
	code(modify(map[string]string{"sparsify": ""}), codes.InvalidArgument, "an empty request")
	resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "born-sparse", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
		Parameters: map[string]string{"clusterID": clusterID, "pool": poolName}, Secrets: secrets(),
		MutableParameters: map[string]string{"sparsify": "2026-11-25", "maxIops": "100"},
	})
	must(t, err, "CreateVolume with a sparsify request")
	c.delete(t, resp.Volume.VolumeId)
	c.delete(t, id)
	e.expectEmpty(t)
}
