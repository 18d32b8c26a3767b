package addons

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-addons/spec/lib/go/identity"
	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// capabilities lists what a socket's Identity advertises.
func capabilities(t *testing.T, e env) []string {
	t.Helper()
	resp, err := e.id.GetCapabilities(harness.Ctx(t), &identity.GetCapabilitiesRequest{})
	harness.Must(t, err, "GetCapabilities")
	var out []string
	for _, c := range resp.Capabilities {
		switch {
		case c.GetService() != nil:
			out = append(out, c.GetService().GetType().String())
		case c.GetReclaimSpace() != nil:
			out = append(out, "reclaim "+c.GetReclaimSpace().GetType().String())
		case c.GetNetworkFence() != nil:
			out = append(out, c.GetNetworkFence().GetType().String())
		case c.GetVolumeReplication() != nil:
			out = append(out, c.GetVolumeReplication().GetType().String())
		}
	}
	slices.Sort(out)
	return out
}

// A node plugin's csi-addons socket advertises and serves the online
// reclaim only; a controller's everything else.
func TestSocketsServeTheirMode(t *testing.T) {
	dir := t.TempDir()
	node := start(t, "node", "--nodeid", "addons-node", "--state-dir", filepath.Join(dir, "state"), "--default-mounter", "fuse")
	if got, want := capabilities(t, node), []string{"NODE_SERVICE", "reclaim ONLINE"}; !slices.Equal(got, want) {
		t.Errorf("node socket advertises %v, want %v", got, want)
	}
	_, err := node.reclaim.ControllerReclaimSpace(harness.Ctx(t), &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: "v1:a:b:c"})
	wantCode(t, err, codes.Unimplemented, "ControllerReclaimSpace on a node's socket")

	ctrl := start(t, "controller")
	want := []string{"CONTROLLER_SERVICE", "GET_CLIENTS_TO_FENCE", "NETWORK_FENCE", "VOLUME_REPLICATION", "reclaim OFFLINE"}
	if got := capabilities(t, ctrl); !slices.Equal(got, want) {
		t.Errorf("controller socket advertises %v, want %v", got, want)
	}
	_, err = ctrl.node.NodeReclaimSpace(harness.Ctx(t), &reclaimspace.NodeReclaimSpaceRequest{VolumeId: "v1:a:b:c", VolumePath: "/x"})
	wantCode(t, err, codes.Unimplemented, "NodeReclaimSpace on a controller's socket")
}

// NodeReclaimSpace through the socket of a plugin in all mode, on
// volumes it staged with rbd-fuse (the mapper this host's kernel
// serves): a filesystem is refused, saying that rbd-fuse passes no
// discards to Ceph (internal/node proves the fstrim itself on a real
// loop-backed ext4); a raw block volume is left alone without an error;
// a volume not staged there, or not at the path given, is NotFound.
func TestNodeReclaimSpace(t *testing.T) {
	dir := t.TempDir()
	e := start(t, "all", "--nodeid", "addons-node", "--state-dir", filepath.Join(dir, "state"), "--default-mounter", "fuse",
		"--controller-secret-dir", harness.WriteControllerSecretDir(t, harness.LoadCluster(t)))
	rwo := &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	fs := &csi.VolumeCapability{AccessMode: rwo, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}
	block := &csi.VolumeCapability{AccessMode: rwo, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	nc := e.p.Node()
	stage := func(name string, c *csi.VolumeCapability) (string, string) {
		t.Helper()
		resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib},
			VolumeCapabilities: []*csi.VolumeCapability{c}, Parameters: e.c.Params(), Secrets: e.c.Secrets()})
		harness.Must(t, err, "CreateVolume %s", name)
		v := resp.Volume
		t.Cleanup(func() {
			_, err := e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: e.c.Secrets()})
			harness.Must(t, err, "DeleteVolume %s", name)
		})
		staging := filepath.Join(dir, name)
		harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir")
		_, err = nc.NodeStageVolume(harness.Ctx(t), &csi.NodeStageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging,
			VolumeCapability: c, VolumeContext: v.VolumeContext, Secrets: e.c.Secrets()})
		harness.Must(t, err, "NodeStageVolume %s", name)
		t.Cleanup(func() {
			_, err := nc.NodeUnstageVolume(harness.Ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging})
			harness.Must(t, err, "NodeUnstageVolume %s", name)
		})
		return v.VolumeId, staging
	}
	fsID, fsStaging := stage("reclaim-fs", fs)
	blockID, blockStaging := stage("reclaim-block", block)
	reclaim := func(id, staging string) error {
		_, err := e.node.NodeReclaimSpace(harness.Ctx(t), &reclaimspace.NodeReclaimSpaceRequest{VolumeId: id, VolumePath: staging, StagingTargetPath: staging})
		return err
	}
	err := reclaim(fsID, fsStaging)
	wantCode(t, err, codes.FailedPrecondition, "NodeReclaimSpace of a filesystem on rbd-fuse")
	if !strings.Contains(err.Error(), "rbd-fuse") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	harness.Must(t, reclaim(blockID, blockStaging), "NodeReclaimSpace of a block volume")
	wantCode(t, reclaim(fsID, filepath.Join(dir, "elsewhere")), codes.NotFound, "NodeReclaimSpace at another staging path")
	wantCode(t, reclaim(fsID+"x", fsStaging), codes.NotFound, "NodeReclaimSpace of a volume not staged here")
	wantCode(t, reclaim("", fsStaging), codes.InvalidArgument, "NodeReclaimSpace without volume_id")
}
