package dr

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// Attachment records are image metadata, which rbd-mirror copies with
// the data: the copy promoted on B carries A's record of the node A had
// attached the volume to. That node is a node of A's site; on B it
// attaches nothing, so it must not keep B's controller from attaching
// the volume to one of B's nodes (nor from deleting it), and B's node
// maps the volume on B's record. (After a failover the promoted copy
// carries the records of the last mirror snapshot the same way.)
func TestPublishAfterRelocation(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	ca, cb := clusters(t)
	a := start(t, "a", ca, cb.ClusterID, append(registryArgs(ca), "--controller-secret-dir", harness.WriteControllerSecretDir(t, ca))...)
	b := start(t, "b", cb, ca.ClusterID, append(registryArgs(cb), "--controller-secret-dir", harness.WriteControllerSecretDir(t, cb))...)
	a.startNode(t, append(registryArgs(ca), "--nodeid", "dr-attach-a")...)
	nodeB := b.startNode(t, append(registryArgs(cb), "--nodeid", "dr-attach-b")...)
	id := a.createVolume(t, b, "dr-attach", 8*mib)
	image := imageOf(t, id)
	rwo := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	publish := func(s *site, node string) error {
		_, err := s.cc.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: rwo, Secrets: s.secrets()})
		return err
	}
	unpublish := func(s *site, node string) {
		_, err := s.cc.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node, Secrets: s.secrets()})
		harness.Must(t, err, "ControllerUnpublish of %s on site %s", node, s.name)
	}
	published := func(s *site) []string {
		resp, err := s.cc.ControllerGetVolume(ctx(t), &csi.ControllerGetVolumeRequest{VolumeId: id})
		harness.Must(t, err, "ControllerGetVolume on site %s", s.name)
		return resp.GetStatus().GetPublishedNodeIds()
	}
	harness.Must(t, publish(a, "dr-attach-a"), "ControllerPublish on A")
	t.Cleanup(func() {
		if t.Failed() { // the end of the test unpublishes; else its index entry
			_, _ = a.c.Rados("-p", a.c.Pool, "rmomapkey", "rbdcsi.nodes", "attach/dr-attach-a/"+id)
		}
	})
	if got := published(a); len(got) != 1 || got[0] != "dr-attach-a" {
		t.Fatalf("A's volume is published to %v", got)
	}

	harness.Must(t, a.enable(t, id, nil), "Enable on A")
	b.waitReplaying(t, image)
	a.demoteWhenPulled(t, id)
	b.promoteWhenArrived(t, id, nil)
	if out, err := b.c.RBD("image-meta", "get", b.c.Pool+"/"+image, "rbdcsi.attach/dr-attach-a"); err != nil {
		t.Fatalf("B's copy does not carry A's attachment record (%v %s): this test proves nothing", err, out)
	}

	harness.Must(t, publish(b, "dr-attach-b"), "ControllerPublish on B to a node of B, with A's record on the copy")
	if got := published(b); len(got) != 1 || got[0] != "dr-attach-b" {
		t.Errorf("B's volume is published to %v, want [dr-attach-b]", got)
	}
	staging := filepath.Join(t.TempDir(), "staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	_, err := nodeB.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwo,
		PublishContext: map[string]string{"rbdcsi.dev/attached-node": "dr-attach-b"}})
	harness.Must(t, err, "NodeStage on B's node")
	_, err = nodeB.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	harness.Must(t, err, "NodeUnstage on B's node")

	// The detach on B while A's rbd-mirror replays B's copy, and so
	// watches it (from site A's address): B's node recorded the address it
	// reaches B from at its stage, and the fence of that node's clients
	// (none left: it unstaged) leaves A's rbd-mirror alone.
	a.waitReplaying(t, image)
	siteA := siteIP(t, ca)
	mirrorA := slices.IndexFunc(cb.Watchers(t, image), func(w string) bool { return ipOf(w) == siteA })
	if mirrorA < 0 {
		t.Fatalf("A's rbd-mirror does not watch B's copy from site A's address %s: %v", siteA, cb.Watchers(t, image))
	}
	unpublish(b, "dr-attach-b")
	for addr := range cb.Blocklist(t) {
		if ipOf(addr) == siteA {
			t.Fatalf("the detach on B blocklisted A's rbd-mirror: %s", addr)
		}
	}
	harness.Must(t, b.disable(t, id), "Disable on B")
	eventually(t, "A's copy removed", 2*time.Minute, func() (bool, string) { return !a.has(image), "still there" })
	unpublish(a, "dr-attach-a") // A's copy is gone: its index entry goes
	_, err = b.cc.DeleteVolume(ctx(t), deleteReq(b, id))
	harness.Must(t, err, "DeleteVolume on B, with A's record on the copy")
}
