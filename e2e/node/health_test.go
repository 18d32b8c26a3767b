package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// nodeHealth is the volume's node conditions as "STATUS Reason".
func (e *env) nodeHealth(v *csi.Volume) []string {
	e.t.Helper()
	resp, err := e.nc.NodeGetVolumeHealth(ctx(e.t), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
	harness.Must(e.t, err, "NodeGetVolumeHealth")
	var got []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		got = append(got, h.GetStatus().String()+" "+h.GetReason())
	}
	return got
}

// An error the kernel's ext4 meets in a staged volume (raised through its
// own error path, /sys/fs/ext4/DEV/trigger_fs_error) is recorded in the
// superblock, and with errors=remount-ro shuts writes off: the node
// reports both, the first until fsck clears it.
func TestFilesystemHealth(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", singleWriter, "errors=remount-ro")
	v := e.createVolume("node-fs-health", 64*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	if got := e.nodeHealth(v); len(got) != 0 {
		t.Fatalf("a freshly staged volume reports %v", got)
	}

	dev, err := filepath.EvalSymlinks(mountSource(staging))
	harness.Must(t, err, "resolving the staged device")
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error")
	harness.Must(t, os.WriteFile(trigger, []byte("1"), 0o200), "raising an ext4 error")
	if err := os.WriteFile(filepath.Join(staging, "after-the-error"), []byte("x"), 0o600); err == nil {
		t.Fatalf("a write after the error succeeded: the filesystem was not remounted read-only")
	}
	want := "INACCESSIBLE FilesystemReadOnly; DEGRADED FilesystemErrors"
	if got := strings.Join(e.nodeHealth(v), "; "); got != want {
		t.Fatalf("after an ext4 error: %q, want %q", got, want)
	}
}

// A device that lags its image after an expansion is reported until the
// node's expansion refreshes it (a fuse mapping's loop device follows
// only then; krbd and rbd-nbd refresh by themselves).
func TestDeviceSmallerThanImageHealth(t *testing.T) {
	e := setup(t)
	c := blockCap(singleWriter)
	v := e.createVolume("node-size-health", 16*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)
	_, err := e.cc.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib}, VolumeCapability: c,
	})
	harness.Must(t, err, "ControllerExpandVolume")
	if got := strings.Join(e.nodeHealth(v), "; "); got != "DEGRADED DeviceSmallerThanImage" {
		t.Fatalf("after the controller's expansion: %q, want the device reported smaller", got)
	}
	target := e.path("target")
	e.publish(v, staging, target, c, false)
	_, err = e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{
		VolumeId: v.VolumeId, VolumePath: target, StagingTargetPath: staging, VolumeCapability: c,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib},
	})
	harness.Must(t, err, "NodeExpandVolume")
	if got := e.nodeHealth(v); len(got) != 0 {
		t.Fatalf("after the node's expansion: %v, want none", got)
	}
}

// NodeGetStorageHealth asks each cluster of the map, as the node's own
// user: one whose monitor does not answer (a loopback port nothing
// listens on) is unreachable, the real one with a volume staged from it
// is not reported.
func TestStorageHealth(t *testing.T) {
	c := harness.LoadCluster(t)
	raw, err := os.ReadFile(c.ConfigFile)
	harness.Must(t, err, "cluster map")
	var clusters []map[string]any
	harness.Must(t, json.Unmarshal(raw, &clusters), "parse the cluster map")
	clusters = append(clusters, map[string]any{"clusterID": "nobody-listens", "monitors": []string{"127.0.0.1:9"}})
	raw, err = json.Marshal(clusters)
	harness.Must(t, err, "encode the cluster map")
	mapFile := filepath.Join(t.TempDir(), "clusters.json")
	harness.Must(t, os.WriteFile(mapFile, raw, 0o600), "write the cluster map")
	e := setupWith(t, c, "--cluster-config", mapFile)

	caps, err := e.nc.NodeGetCapabilities(ctx(t), &csi.NodeGetCapabilitiesRequest{})
	harness.Must(t, err, "NodeGetCapabilities")
	if !slices.ContainsFunc(caps.GetCapabilities(), func(c *csi.NodeServiceCapability) bool {
		return c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH
	}) {
		t.Fatalf("GET_STORAGE_HEALTH not advertised with a node user: %v", caps.GetCapabilities())
	}
	mc := mountCap("ext4", singleWriter)
	v := e.createVolume("node-storage-health", 16*mib, mc)
	e.stage(v, e.path("staging"), mc)
	resp, err := e.nc.NodeGetStorageHealth(ctx(t), &csi.NodeGetStorageHealthRequest{})
	harness.Must(t, err, "NodeGetStorageHealth")
	var got []string
	for _, b := range resp.GetBackendHealth() {
		got = append(got, b.GetStatus().String()+" "+b.GetReason())
		if !strings.Contains(b.GetMessage(), "nobody-listens") {
			t.Errorf("the condition does not name the cluster: %q", b.GetMessage())
		}
	}
	if strings.Join(got, "; ") != "STORAGE_UNREACHABLE ClusterUnreachable" {
		t.Fatalf("storage health %q, want the unreachable cluster alone", got)
	}
}

// A krbd mapping whose kernel client is blocklisted (as a force detach
// fences it) is reported INACCESSIBLE, found by asking the cluster as the
// node's own user about the client the kernel names in sysfs. Nothing is
// remapped.
func TestBlocklistedClientHealth(t *testing.T) {
	if mounter() != "krbd" {
		t.Skipf("only the kernel names a mapping's client (/sys/bus/rbd/devices/N/client_addr); with %s the client is a librbd process", mounter())
	}
	e := setup(t)
	c := blockCap(singleWriter)
	v := e.createVolume("node-blocklisted", 16*mib, c)
	e.stage(v, e.path("staging"), c)
	if got := e.nodeHealth(v); len(got) != 0 {
		t.Fatalf("a freshly staged volume reports %v", got)
	}
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	addr := ""
	devs, _ := filepath.Glob("/sys/bus/rbd/devices/*/name")
	for _, n := range devs {
		if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == image {
			a, err := os.ReadFile(filepath.Join(filepath.Dir(n), "client_addr"))
			harness.Must(t, err, "reading the mapping's client_addr")
			addr = strings.TrimSpace(string(a))
		}
	}
	if addr == "" {
		t.Fatalf("no krbd device maps %s", image)
	}
	out, err := e.c.Ceph("osd", "blocklist", "add", addr, "600")
	harness.Must(t, err, "blocklisting the kernel client: %s", out)
	// Lifted before the unstage (registered later, it runs first).
	t.Cleanup(func() {
		if out, err := e.c.Ceph("osd", "blocklist", "rm", addr); err != nil {
			t.Errorf("lifting the blocklist entry: %v: %s", err, out)
		}
	})
	if got := strings.Join(e.nodeHealth(v), "; "); got != "INACCESSIBLE ClientBlocklisted" {
		t.Fatalf("with the kernel client blocklisted: %q, want ClientBlocklisted", got)
	}
}
