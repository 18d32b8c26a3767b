package controller

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// attachEnv is a controller plus two node plugins (node-a, node-b) that
// register themselves in the node registry, all on one machine. The nodes
// run as a node user with the caps docs/install.md#3-the-ceph-users gives
// it: map and use the pool's images, write the registry object, lift
// blocklist entries (their fences). Their stages carry no secrets: they
// map as that user, as with the shipped StorageClasses.
type attachEnv struct {
	env
	nodes     map[string]nodePlugin
	secretDir string
	registry  []string
	user, key string // the node user
}

// nodePlugin is a node plugin on this machine (*harness.Plugin) or on
// another kernel-test guest (*harness.RemotePlugin).
type nodePlugin interface {
	Node() csi.NodeClient
	Logs() string
	Stop()
}

// setupAttach starts the controller, with extra flags, and the nodes.
func setupAttach(t *testing.T, ctrlFlags ...string) attachEnv {
	e := newAttachEnv(t, ctrlFlags...)
	for _, n := range []string{"node-a", "node-b"} {
		e.startNode(t, n)
	}
	return e
}

// newAttachEnv starts the controller, with extra flags, and makes the
// node user; it starts no node.
func newAttachEnv(t *testing.T, ctrlFlags ...string) attachEnv {
	c := harness.LoadCluster(t)
	ctrlSecretDir := harness.WriteControllerSecretDir(t, c)
	registry := []string{"--node-registry", c.ClusterID + "/" + c.Pool, "--node-registry-ttl", "30s"}
	args := append([]string{"--mode", "controller", "--controller-secret-dir", ctrlSecretDir}, registry...)
	p := harness.StartPlugin(t, c, append(args, ctrlFlags...)...)
	secretDir, user, key := c.NodeSecretDir(t, "rbdcsi-node-attach")
	e := attachEnv{env: env{c: c, p: p, cc: p.Controller()}, nodes: map[string]nodePlugin{}, secretDir: secretDir,
		registry: registry, user: user, key: key}
	t.Cleanup(func() { c.ExpectNoImages(t) })
	return e
}

// writeSecretDir writes a user's credentials as a mounted Secret holds them
// (--node-secret-dir).
func writeSecretDir(t *testing.T, user, key string) string {
	dir := t.TempDir()
	for name, v := range map[string]string{"userID": user, "userKey": key} {
		harness.Must(t, os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600), "write %s", name)
	}
	return dir
}

// startNode starts a node plugin that registers itself as name.
func (e attachEnv) startNode(t *testing.T, name string, extra ...string) {
	e.nodes[name] = harness.StartPlugin(t, e.c, e.nodeArgs(name, e.secretDir, t.TempDir(), extra...)...)
}

// nodeArgs are the flags of a node plugin that registers itself as name
// with the node user's credentials in secretDir and keeps its state in
// stateDir; extra flags come last, and so win.
func (e attachEnv) nodeArgs(name, secretDir, stateDir string, extra ...string) []string {
	args := append([]string{"--mode", "node", "--nodeid", name, "--node-secret-dir", secretDir,
		"--state-dir", stateDir, "--default-mounter", "fuse"}, e.registry...)
	return append(args, extra...)
}

func capOf(mode csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}
	}
	return c
}

func (e attachEnv) publish(t *testing.T, vol, node string, c *csi.VolumeCapability, ro bool) error {
	_, err := e.cc.ControllerPublishVolume(harness.Ctx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: node, VolumeCapability: c, Readonly: ro, Secrets: e.c.Secrets()})
	return err
}

func (e attachEnv) unpublish(t *testing.T, vol, node string) {
	t.Helper()
	_, err := e.cc.ControllerUnpublishVolume(harness.Ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node, Secrets: e.c.Secrets()})
	harness.Must(t, err, "unpublish %s from %s", vol, node)
}

func (e attachEnv) publishedNodes(t *testing.T, vol string) []string {
	t.Helper()
	resp, err := e.cc.ControllerGetVolume(harness.Ctx(t), &csi.ControllerGetVolumeRequest{VolumeId: vol})
	harness.Must(t, err, "ControllerGetVolume")
	return resp.Status.PublishedNodeIds
}

func TestAttachRules(t *testing.T) {
	e := setupAttach(t)
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	v := e.mustCreate(t, "attach-rwo", 8*mib).VolumeId

	harness.Must(t, e.publish(t, v, "node-a", rwo, false), "publish RWO to node-a")
	harness.Must(t, e.publish(t, v, "node-a", rwo, false), "publish again (idempotent)")
	// librbd copies metadata into clones: a clone must not inherit the attachment.
	clone, err := e.createFrom(t, "attach-rwo-clone", 8*mib, fromVolume(v))
	harness.Must(t, err, "clone an attached volume")
	if got := e.publishedNodes(t, clone.VolumeId); len(got) != 0 {
		t.Fatalf("the clone of an attached volume is attached to %v", got)
	}
	e.delete(t, clone.VolumeId)
	err = e.publish(t, v, "node-b", rwo, false)
	wantCode(t, err, codes.FailedPrecondition, "RWO to a second node")
	if st, _ := grpcstatus.FromError(err); st == nil || !strings.Contains(st.Message(), "node-a") {
		t.Fatalf("the refusal does not name the node holding the volume: %v", err)
	}
	err = e.publish(t, v, "node-a", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), true)
	wantCode(t, err, codes.AlreadyExists, "same node, other read-only flag")
	_, err = e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: v, Secrets: e.c.Secrets()})
	wantCode(t, err, codes.FailedPrecondition, "delete an attached volume")
	if got := e.publishedNodes(t, v); len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("published nodes %v", got)
	}

	// Records live in Ceph: a controller restart keeps them.
	e.p.Stop()
	e.p.Start()
	wantCode(t, e.publish(t, v, "node-b", rwo, false), codes.FailedPrecondition, "RWO to node-b after a controller restart")

	// The move: detach from node-a, attach to node-b.
	e.unpublish(t, v, "node-a")
	e.unpublish(t, v, "node-a") // idempotent
	harness.Must(t, e.publish(t, v, "node-b", rwo, false), "publish RWO to node-b after the move")
	if got := e.publishedNodes(t, v); len(got) != 1 || got[0] != "node-b" {
		t.Fatalf("published nodes after the move %v", got)
	}
	e.unpublish(t, v, "node-b")

	// ReadOnlyMany: any number of readers, no writer next to them.
	rox := capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, false)
	harness.Must(t, e.publish(t, v, "node-a", rox, true), "ROX to node-a")
	harness.Must(t, e.publish(t, v, "node-b", rox, true), "ROX to node-b")
	lv, err := e.cc.ListVolumes(harness.Ctx(t), &csi.ListVolumesRequest{})
	harness.Must(t, err, "ListVolumes")
	if len(lv.Entries) != 1 || len(lv.Entries[0].Status.GetPublishedNodeIds()) != 2 {
		t.Fatalf("ListVolumes published nodes: %+v", lv.Entries)
	}
	e.unpublish(t, v, "node-a")
	e.unpublish(t, v, "node-b")

	// ReadWriteMany: raw block only.
	b := e.mustCreate(t, "attach-rwx", 8*mib).VolumeId
	rwx := capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, true)
	harness.Must(t, e.publish(t, b, "node-a", rwx, false), "RWX block to node-a")
	harness.Must(t, e.publish(t, b, "node-b", rwx, false), "RWX block to node-b")
	wantCode(t, e.publish(t, b, "node-b", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false), false), codes.InvalidArgument, "RWX filesystem")
	e.unpublish(t, b, "node-a")
	e.unpublish(t, b, "node-b")

	// Unknown node and volume.
	wantCode(t, e.publish(t, v, "node-nowhere", rwo, false), codes.NotFound, "unknown node")
	wantCode(t, e.publish(t, "v1:"+e.c.ClusterID+":rbd:csi-vol-00000000000000000000", "node-a", rwo, false), codes.NotFound, "unknown volume")
	e.unpublish(t, "v1:"+e.c.ClusterID+":rbd:csi-vol-00000000000000000000", "node-a")
	e.unpublish(t, v, "node-nowhere")

	// A node plugin that stops is unknown at once.
	e.nodes["node-b"].Stop()
	wantCode(t, e.publish(t, v, "node-b", rwo, false), codes.NotFound, "stopped node")
}

func TestConcurrentPublishOneWinner(t *testing.T) {
	e := setupAttach(t)
	v := e.mustCreate(t, "attach-race", 8*mib).VolumeId
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, n := range []string{"node-a", "node-b"} {
			wg.Add(1)
			go func(n string) {
				defer wg.Done()
				var err error
				for i := 0; i < 50; i++ {
					if err = e.publish(t, v, n, rwo, false); grpcstatus.Code(err) != codes.Aborted {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				errs[n] = err
				mu.Unlock()
			}(n)
		}
		wg.Wait()
		won := 0
		for n, err := range errs {
			switch grpcstatus.Code(err) {
			case codes.OK:
				won++
			case codes.FailedPrecondition:
			default:
				t.Fatalf("round %d, %s: %v", round, n, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d winners (%v)", round, won, errs)
		}
		for _, n := range e.publishedNodes(t, v) {
			e.unpublish(t, v, n)
		}
	}
}

func (e attachEnv) stage(t *testing.T, node string, vol *csi.Volume, staging string) error {
	_, err := e.nodes[node].Node().NodeStageVolume(harness.Ctx(t), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: staging, VolumeContext: vol.VolumeContext,
		VolumeCapability: capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false),
	})
	return err
}

func (e attachEnv) unstage(t *testing.T, node string, vol *csi.Volume, staging string) {
	t.Helper()
	_, err := e.nodes[node].Node().NodeUnstageVolume(harness.Ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: staging})
	harness.Must(t, err, "unstage on %s", node)
}

// NodeStage maps a single-node volume only on the node holding its
// attachment, so a stale pod on the node it moved away from cannot write.
func TestNodeStageIsFenced(t *testing.T) {
	e := setupAttach(t)
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	resp, err := e.create(t, "fenced", 64*mib)
	harness.Must(t, err, "create")
	vol := resp.Volume
	defer e.delete(t, vol.VolumeId)
	staging := map[string]string{}
	for _, n := range []string{"node-a", "node-b"} {
		dir, err := os.MkdirTemp("", "rbdcsi-fence-")
		harness.Must(t, err, "staging dir")
		staging[n] = dir
		defer os.Remove(dir) // empty once unstaged; never RemoveAll a possible mount
	}

	wantCode(t, e.stage(t, "node-a", vol, staging["node-a"]), codes.FailedPrecondition, "stage before any attachment")
	harness.Must(t, e.publish(t, vol.VolumeId, "node-a", rwo, false), "publish to node-a")
	wantCode(t, e.stage(t, "node-b", vol, staging["node-b"]), codes.FailedPrecondition, "stage on the node without the attachment")
	harness.Must(t, e.stage(t, "node-a", vol, staging["node-a"]), "stage on the attached node")
	harness.Must(t, e.stage(t, "node-a", vol, staging["node-a"]), "repeated stage on the attached node")

	// The move, as a force detach makes it: node-a still has the volume
	// staged, and even its repeated stage is refused from now on.
	e.unpublish(t, vol.VolumeId, "node-a")
	harness.Must(t, e.publish(t, vol.VolumeId, "node-b", rwo, false), "publish to node-b")
	wantCode(t, e.stage(t, "node-a", vol, staging["node-a"]), codes.FailedPrecondition, "repeated stage on the old node, still staged there, after the move")
	e.unstage(t, "node-a", vol, staging["node-a"])
	wantCode(t, e.stage(t, "node-a", vol, staging["node-a"]), codes.FailedPrecondition, "stage on the old node after the move")
	harness.Must(t, e.stage(t, "node-b", vol, staging["node-b"]), "stage on the new node")
	e.unstage(t, "node-b", vol, staging["node-b"])
	e.unpublish(t, vol.VolumeId, "node-b")
}
