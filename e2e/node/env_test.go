// Package node tests the Node service of the real plugin binary on the real
// local Ceph cluster: real mappings, mkfs, mounts and bind mounts. On this
// machine, whose kernel has neither krbd nor nbd, it maps with the fuse
// mounter (rbd-fuse and loop devices); scripts/kernel-test.sh runs it again
// in a VM with a real kernel, once with krbd and once with nbd.
package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

const mib = 1 << 20

// root holds every path of this test binary: state dirs, staging and target
// paths. TestMain checks nothing is left under it.
var root string

func TestMain(m *testing.M) {
	var err error
	root, err = os.MkdirTemp("", "rbdcsi-node-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := harness.CheckPoolAfter(m)
	if left := leftovers(root); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: left behind after the suite:\n  %s\n", strings.Join(left, "\n  "))
		fmt.Fprintf(os.Stderr, "(not removing %s: it may hold mounts)\n", root)
		os.Exit(1)
	}
	_ = os.RemoveAll(root) // no mount under it: checked just above
	os.Exit(code)
}

type env struct {
	t      *testing.T
	c      harness.Cluster
	p      *harness.Plugin
	cc     csi.ControllerClient
	nc     csi.NodeClient
	dir    string   // this test's paths
	state  string   // the plugin's --state-dir
	images []string // of the volumes the test created
	// keks are secret keys beyond the Ceph user's that calls carry (the
	// KEKs of encrypted volumes), kept out of logs and files like the key.
	keks map[string]string
	// secretDir is the controller's --kms-secret-dir when a test set one
	// (setupCrypt): the KEK Secret, for the rotation.
	secretDir string
	nodeKey   string // the node user's key (--node-secret-dir)
}

// secrets are what the test's calls carry: the KEKs, if any, and no Ceph
// user, as with the shipped StorageClasses. The controller acts as the CSI
// user (--controller-secret-dir), the node as the node user of the install
// guide's caps (--node-secret-dir): every stage maps with those caps.
func (e *env) secrets() map[string]string {
	return maps.Clone(e.keks)
}

// mounter is the mapper the suite stages with: $RBDCSI_E2E_MOUNTER (krbd or
// nbd in the kernel-test guest), fuse by default.
func mounter() string {
	if m := os.Getenv("RBDCSI_E2E_MOUNTER"); m != "" {
		return m
	}
	return "fuse"
}

// devicePrefix is how the devices of mounter() are named.
func devicePrefix() string {
	switch mounter() {
	case "krbd":
		return "/dev/rbd"
	case "nbd":
		return "/dev/nbd"
	}
	return "/dev/loop"
}

// setup starts a plugin serving controller and node, with mounter() as the
// default mounter. Its cleanup, which runs after the volume cleanups the test
// registers later, asserts that nothing is left on the node or in Ceph.
func setup(t *testing.T, extraArgs ...string) *env {
	t.Helper()
	return setupWith(t, harness.LoadCluster(t), extraArgs...)
}

// setupWith is setup for the cluster-map entry, user and namespace c names.
func setupWith(t *testing.T, c harness.Cluster, extraArgs ...string) *env {
	t.Helper()
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	harness.Must(t, os.MkdirAll(dir, 0o755), "mkdir")
	e := &env{t: t, c: c, dir: dir, state: filepath.Join(dir, "state")}
	var nodeDir string
	nodeDir, _, e.nodeKey = c.NodeSecretDir(t, "rbdcsi-node-e2e")
	args := []string{"--mode", "all", "--nodeid", "test-node", "--default-mounter", mounter(),
		"--state-dir", e.state, "--controller-secret-dir", harness.WriteControllerSecretDir(t, c), "--node-secret-dir", nodeDir, "--v", "4",
		// Under emulation a map takes several times as long.
		"--map-timeout", (harness.Slowdown() * time.Minute).String()}
	e.p = harness.StartPlugin(t, c, append(args, extraArgs...)...)
	e.cc, e.nc = e.p.Controller(), e.p.Node()
	t.Cleanup(func() {
		if left := leftovers(dir); len(left) > 0 {
			t.Errorf("left behind on the node:\n  %s", strings.Join(left, "\n  "))
		}
		for _, sub := range []string{"volumes", "keys"} {
			if files, _ := os.ReadDir(filepath.Join(e.state, sub)); len(files) > 0 {
				t.Errorf("files left in %s: %v", filepath.Join(e.state, sub), files)
			}
		}
		e.expectImagesGone()
		e.expectKeyNowhere()
	})
	return e
}

// expectKeyNowhere looks for the CSI user's key where it must never be
// (keys come with each request and never show in logs, errors, visible
// command lines or files that outlive the call): command lines of running
// processes, the plugin's log, and any file under the test's paths (the
// plugin's state included). Process
// environments are not checked: this test's own environment carries the
// key (CEPH_CSI_KEY), and every process started from it inherits it.
func (e *env) expectKeyNowhere() {
	e.t.Helper()
	keys := map[string]string{"the Ceph key": e.c.CSIKey, "the node user's key": e.nodeKey}
	for name, kek := range e.keks {
		if !strings.HasSuffix(name, "Current") { // names a KEK, holds none
			keys[name] = kek
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for what, key := range keys {
		for _, p := range procs {
			if b, err := os.ReadFile(filepath.Join(p, "cmdline")); err == nil && strings.Contains(string(b), key) {
				e.t.Errorf("%s is on the command line of %s", what, p)
			}
		}
		if strings.Contains(e.p.Logs(), key) {
			e.t.Errorf("%s is in the plugin log", what)
		}
		for _, p := range tree(e.t, e.dir) {
			path, _, _ := strings.Cut(p, " ")
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), key) {
				e.t.Errorf("%s is in %s", what, path)
			}
		}
	}
}

// expectImagesGone checks that the images of this test's volumes are gone
// from the pool and its trash. (Not the whole pool: go test runs the e2e
// packages in parallel against one cluster, so other packages' volumes
// come and go meanwhile.)
func (e *env) expectImagesGone() {
	e.t.Helper()
	images := strings.Fields(strings.Join(e.c.Images(e.t), " "))
	trash, err := e.c.RBD(append([]string{"trash", "ls", "--all", "-p", e.c.Pool}, e.c.NamespaceArgs()...)...)
	harness.Must(e.t, err, "rbd trash ls: %s", trash)
	for _, img := range e.images {
		if slices.Contains(images, img) || strings.Contains(trash, img) {
			e.t.Errorf("image %s of a deleted volume is still in pool %s", img, e.c.Pool)
		}
	}
}

// path returns a path under the test's directory (not created).
func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

func mountCap(fs string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs, MountFlags: flags}},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

const (
	multiWriter  = csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	singleWriter = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	readerOnly   = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

// createVolume creates a volume through the controller and deletes it when
// the test ends.
func (e *env) createVolume(name string, size int64, c *csi.VolumeCapability, params ...string) *csi.Volume {
	e.t.Helper()
	resp, err := e.cc.CreateVolume(harness.Ctx(e.t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{c}, Parameters: e.c.Params(params...), Secrets: e.secrets(),
	})
	harness.Must(e.t, err, "CreateVolume %s", name)
	id := resp.Volume.VolumeId
	e.images = append(e.images, id[strings.LastIndex(id, ":")+1:])
	e.t.Cleanup(func() {
		_, err := e.cc.DeleteVolume(harness.Ctx(e.t), &csi.DeleteVolumeRequest{VolumeId: resp.Volume.VolumeId, Secrets: e.secrets()})
		harness.Must(e.t, err, "DeleteVolume %s", name)
	})
	return resp.Volume
}

func (e *env) stageReq(v *csi.Volume, staging string, c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{
		VolumeId: v.VolumeId, StagingTargetPath: staging, VolumeCapability: c,
		VolumeContext: v.VolumeContext, Secrets: e.secrets(),
	}
}

// stage stages the volume and unstages it when the test ends.
func (e *env) stage(v *csi.Volume, staging string, c *csi.VolumeCapability) {
	e.t.Helper()
	harness.Must(e.t, os.MkdirAll(staging, 0o750), "mkdir staging")
	_, err := e.nc.NodeStageVolume(harness.Ctx(e.t), e.stageReq(v, staging, c))
	harness.Must(e.t, err, "NodeStageVolume %s", v.VolumeId)
	e.t.Cleanup(func() { e.unstage(v, staging) })
}

// stageRetryingAborted is stage, retrying for up to two minutes while
// another operation on the volume is still in progress.
func (e *env) stageRetryingAborted(v *csi.Volume, staging string, c *csi.VolumeCapability) {
	e.t.Helper()
	deadline := time.Now().Add(harness.Slowdown() * 2 * time.Minute)
	for {
		_, err := e.nc.NodeStageVolume(harness.Ctx(e.t), e.stageReq(v, staging, c))
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			harness.Must(e.t, err, "NodeStageVolume %s", v.VolumeId)
			break
		}
		time.Sleep(time.Second)
	}
	e.t.Cleanup(func() { e.unstage(v, staging) })
}

func (e *env) unstage(v *csi.Volume, staging string) {
	e.t.Helper()
	_, err := e.nc.NodeUnstageVolume(harness.Ctx(e.t), &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging})
	harness.Must(e.t, err, "NodeUnstageVolume %s", v.VolumeId)
}

func (e *env) publishReq(v *csi.Volume, staging, target string, c *csi.VolumeCapability, ro bool) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId: v.VolumeId, StagingTargetPath: staging, TargetPath: target, VolumeCapability: c,
		Readonly: ro, VolumeContext: v.VolumeContext,
	}
}

// publish publishes the volume and unpublishes it when the test ends.
func (e *env) publish(v *csi.Volume, staging, target string, c *csi.VolumeCapability, ro bool) {
	e.t.Helper()
	_, err := e.nc.NodePublishVolume(harness.Ctx(e.t), e.publishReq(v, staging, target, c, ro))
	harness.Must(e.t, err, "NodePublishVolume %s at %s", v.VolumeId, target)
	e.t.Cleanup(func() { e.unpublish(v, target) })
}

func (e *env) unpublish(v *csi.Volume, target string) {
	e.t.Helper()
	_, err := e.nc.NodeUnpublishVolume(harness.Ctx(e.t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target})
	harness.Must(e.t, err, "NodeUnpublishVolume %s at %s", v.VolumeId, target)
}

// expectCode fails unless err carries the gRPC code.
func expectCode(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

// writeRandom writes n random-looking bytes to path and returns their
// checksum.
func writeRandom(t *testing.T, path string, n int) string {
	t.Helper()
	data := pattern(n, path)
	harness.Must(t, os.WriteFile(path, data, 0o644), "write %s", path)
	f, err := os.Open(path)
	harness.Must(t, err, "open %s", path)
	harness.Must(t, f.Sync(), "sync %s", path)
	f.Close()
	return sum(data)
}

// pattern is deterministic per seed, distinct between seeds.
func pattern(n int, seed string) []byte {
	out := make([]byte, 0, n+32)
	block := sha256.Sum256([]byte(seed + time.Now().String()))
	for len(out) < n {
		block = sha256.Sum256(block[:])
		out = append(out, block[:]...)
	}
	return out[:n]
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	harness.Must(t, err, "read %s", path)
	return sum(b)
}

func ctx(t *testing.T) context.Context { return harness.Ctx(t) }
