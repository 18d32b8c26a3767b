// Package addons tests the csi-addons services through the real plugin's
// csi-addons socket against the real Ceph cluster of scripts/with-cluster.sh:
// the controller's ReclaimSpace (sparsify, usage read back with rbd du),
// NetworkFence (entries read back from the monitors' blocklist as admin,
// and their effect on real clients), and the node plugin's socket.
package addons

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-addons/spec/lib/go/fence"
	"github.com/csi-addons/spec/lib/go/identity"
	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

const mib = 1 << 20

func TestMain(m *testing.M) { os.Exit(harness.CheckPoolAfter(m)) }

// env is a plugin with its csi-addons socket.
type env struct {
	c       harness.Cluster
	p       *harness.Plugin
	cc      csi.ControllerClient
	id      identity.IdentityClient
	reclaim reclaimspace.ReclaimSpaceControllerClient
	node    reclaimspace.ReclaimSpaceNodeClient
	fence   fence.FenceControllerClient
}

// start runs the plugin in mode with its csi-addons socket.
func start(t *testing.T, mode string, args ...string) env {
	c := harness.LoadCluster(t)
	sock := filepath.Join(t.TempDir(), "csi-addons.sock")
	p := harness.StartPlugin(t, c, append([]string{"--mode", mode, "--csi-addons-endpoint", "unix://" + sock, "--v", "5"}, args...)...)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	harness.Must(t, err, "csi-addons connection")
	t.Cleanup(func() {
		conn.Close()
		if strings.Contains(p.Logs(), c.CSIKey) || strings.Contains(p.Logs(), c.AdminKey) {
			t.Errorf("the plugin's log shows a key")
		}
	})
	return env{c: c, p: p, cc: p.Controller(), id: identity.NewIdentityClient(conn),
		reclaim: reclaimspace.NewReclaimSpaceControllerClient(conn), node: reclaimspace.NewReclaimSpaceNodeClient(conn),
		fence: fence.NewFenceControllerClient(conn)}
}

// adminSecrets are the CSI secrets of the cluster's admin.
func (e env) adminSecrets() map[string]string {
	return map[string]string{"userID": "admin", "userKey": e.c.AdminKey}
}

// createVolume makes a block volume, removed when the test ends.
func (e env) createVolume(t *testing.T, name string, size int64) string {
	t.Helper()
	resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		}},
		Parameters: e.c.Params(), Secrets: e.c.Secrets(),
	})
	harness.Must(t, err, "CreateVolume %s", name)
	id := resp.Volume.VolumeId
	t.Cleanup(func() {
		_, err := e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.c.Secrets()})
		harness.Must(t, err, "DeleteVolume %s", id)
	})
	return id
}

func imageOf(volumeID string) string { return volumeID[strings.LastIndex(volumeID, ":")+1:] }

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

// eventually retries f until it is true, or fails the test.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(harness.Slowdown() * 30 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
