package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// orphanMapper is a fakeMapper whose daemon can die: the mapping leaves
// the list while the device stays, until a Reattach brings it back.
type orphanMapper struct {
	fakeMapper
	orphan    map[string]string // device -> image, daemon gone
	reattachs []mapper.MapRequest
}

func (o *orphanMapper) kill(image string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.orphan == nil {
		o.orphan = map[string]string{}
	}
	o.orphan[o.mapped[image]] = image
	delete(o.mapped, image)
}

func (o *orphanMapper) Orphaned(_ context.Context, device string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.orphan[device]
	return ok, nil
}

func (o *orphanMapper) Reattach(_ context.Context, req mapper.MapRequest, device string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reattachs = append(o.reattachs, req)
	o.mapped[o.orphan[device]] = device
	delete(o.orphan, device)
	return nil
}

// A staged nbd volume whose daemon died: a call without a key says what
// to configure; a call with one re-attaches the same device with the
// volume's cookie, unless the volume is now attached to another node.
func TestHealReattachesAnOrphanedMapping(t *testing.T) {
	f := newFixture(t)
	om := &orphanMapper{}
	f.n.mappers["nbd"] = om
	// A block volume: with a filesystem, intact would also need the
	// staging mount's device number, which a made-up device has not.
	blk := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	stage := f.stageReq(blk)
	stage.VolumeContext["mounter"] = "nbd"
	if _, err := f.n.NodeStageVolume(context.Background(), stage); err != nil {
		t.Fatal(err)
	}
	if len(om.maps) != 1 || om.maps[0].Cookie != nbdCookie(volID) {
		t.Fatalf("mapped with %+v, want the volume's cookie", om.maps)
	}
	om.kill("rbd/csi-vol-0123456789abcdef0123")

	publish := &csi.NodePublishVolumeRequest{
		VolumeId: volID, StagingTargetPath: stage.StagingTargetPath, TargetPath: filepath.Join(f.dir, "target"),
		VolumeCapability: blk, VolumeContext: stage.VolumeContext,
	}
	_, err := f.n.NodePublishVolume(context.Background(), publish)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node-publish-secret") {
		t.Errorf("publish without a key: %v", err)
	}

	f.n.fence = stubFence{meta: map[string]string{attach.MetaPrefix + "n2": "rw:SINGLE_NODE_WRITER"}}
	if _, err := f.n.NodeStageVolume(context.Background(), stage); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("restage of a volume attached to n2: %v", err)
	}
	publish.Secrets = stage.Secrets
	if _, err := f.n.NodePublishVolume(context.Background(), publish); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("republish of a volume attached to n2: %v", err)
	}
	if len(om.reattachs) != 0 {
		t.Fatalf("re-attached without a key or while attached elsewhere: %+v", om.reattachs)
	}

	f.n.fence = stubFence{meta: map[string]string{attach.MetaPrefix + "n1": "rw:SINGLE_NODE_WRITER"}}
	if _, err := f.n.NodeStageVolume(context.Background(), stage); err != nil {
		t.Fatalf("restage with a key: %v", err)
	}
	if len(om.reattachs) != 1 {
		t.Fatalf("re-attaches: %+v", om.reattachs)
	}
	r := om.reattachs[0]
	if r.Cookie != nbdCookie(volID) || r.Cred.Key != testKey || r.Image.Name != "csi-vol-0123456789abcdef0123" || r.MonHost != "v2:10.0.0.1:3300" {
		t.Errorf("re-attach request %+v", r)
	}
	if len(om.maps) != 1 {
		t.Errorf("mapped anew instead of re-attaching: %+v", om.maps)
	}
}
