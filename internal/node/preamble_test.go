package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestArgumentOrder pins which fault a request with several gets answered
// for: callers (csi-sanity among them) see the first check that fails. The
// volume is locked, so every argument check must come before the lock.
func TestArgumentOrder(t *testing.T) {
	f := newFixture(t)
	release, _ := f.n.locks.TryLock("vol/" + volID)
	defer release()
	staging, target := filepath.Join(f.dir, "staging"), filepath.Join(f.dir, "target")

	publish := func(id, target, staging string, c *csi.VolumeCapability) error {
		_, err := f.n.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: target, StagingTargetPath: staging, VolumeCapability: c,
		})
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"no ID, bad target", publish("", "rel", "", nil), codes.InvalidArgument},
		{"bad target, bad ID", publish("garbage", "rel", "", nil), codes.InvalidArgument},
		{"no capability, no staging", publish("garbage", target, "", nil), codes.InvalidArgument},
		{"no staging, bad ID", publish("garbage", target, "", fsCap(rwo)), codes.FailedPrecondition},
		{"bad staging, bad ID", publish("garbage", target, "rel", fsCap(rwo)), codes.InvalidArgument},
		{"same paths, bad ID", publish("garbage", target, target, fsCap(rwo)), codes.InvalidArgument},
		{"bad ID", publish("garbage", target, staging, fsCap(rwo)), codes.NotFound},
		{"locked", publish(volID, target, staging, fsCap(rwo)), codes.Aborted},
	} {
		if status.Code(c.err) != c.want {
			t.Errorf("publish, %s: %v, want %v", c.name, c.err, c.want)
		}
	}

	stage := func(edit func(*csi.NodeStageVolumeRequest)) error {
		req := f.stageReq(fsCap(rwo))
		edit(req)
		_, err := f.n.NodeStageVolume(context.Background(), req)
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"no ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId, r.StagingTargetPath = "", "rel" }), codes.InvalidArgument},
		{"bad staging, bad ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId, r.StagingTargetPath = "garbage", "rel" }), codes.InvalidArgument},
		{"no capability, bad ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId, r.VolumeCapability = "garbage", nil }), codes.InvalidArgument},
		{"bad ID, bad context", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId, r.VolumeContext["pool"] = "garbage", "other" }), codes.NotFound},
		{"bad context", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["pool"] = "other" }), codes.InvalidArgument},
		{"unknown mounter", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["mounter"] = "nbd" }), codes.InvalidArgument},
		{"locked", stage(func(*csi.NodeStageVolumeRequest) {}), codes.Aborted},
	} {
		if status.Code(c.err) != c.want {
			t.Errorf("stage, %s: %v, want %v", c.name, c.err, c.want)
		}
	}
}
