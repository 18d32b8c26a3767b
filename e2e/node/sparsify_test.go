package node

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A detached volume's blocks that hold zeros go back to Ceph when a user
// asks for a sparsify (a VolumeAttributesClass's sparsify value, reaching
// ControllerModifyVolume): refused while the volume is staged, started and
// answered Aborted until done, then rbd du has fallen; the same request
// again does nothing.
func TestSparsifyGivesZerosBack(t *testing.T) {
	e := setup(t)
	c := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("sparsify", 64*mib, c)
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	staging, target := e.path("staging"), e.path("dev")
	e.stage(v, staging, c)
	_, err := e.nc.NodePublishVolume(ctx(t), e.publishReq(v, staging, target, c, false))
	harness.Must(t, err, "NodePublishVolume")
	const size = 32 * mib
	writeAt(t, target, 0, make([]byte, size))
	modify := func(request string) error {
		_, err := e.cc.ControllerModifyVolume(ctx(t), &csi.ControllerModifyVolumeRequest{
			VolumeId: v.VolumeId, Secrets: e.c.Secrets(), MutableParameters: map[string]string{"sparsify": request},
		})
		return err
	}
	// Staged, the image is open on this node (rbd-fuse, krbd or nbd).
	expectCode(t, modify("first"), codes.FailedPrecondition, "a sparsify of a mapped volume")
	e.unpublish(v, target)
	e.unstage(v, staging)

	before := e.usedBytes(image)
	deadline := time.Now().Add(harness.Slowdown() * 2 * time.Minute)
	for {
		err := modify("first")
		if err == nil {
			break
		}
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			t.Fatalf("ControllerModifyVolume sparsify: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	after := e.usedBytes(image)
	t.Logf("%s: rbd du used %d MiB after %d MiB of zeros were written, %d MiB after the sparsify", mounter(), before>>20, size>>20, after>>20)
	if before < size*2/3 || after+size*2/3 > before {
		t.Errorf("the sparsify gave back %d of the %d MiB of zeros (used %d -> %d MiB)", (before-min(before, after))>>20, size>>20, before>>20, after>>20)
	}
	harness.Must(t, modify("first"), "the same request again")
	out, err := e.c.RBD(append([]string{"image-meta", "get", "--pool", e.c.Pool, image, "rbdcsi.sparsified"}, e.c.NamespaceArgs()...)...)
	if err != nil || strings.TrimSpace(out) != "first" {
		t.Errorf("the done request is not recorded: %q, %v", out, err)
	}
}
