package controller

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// Probe fails while the cluster map on disk is broken (the plugin keeps
// serving the last good one) and recovers with it; SIGTERM stops the
// plugin cleanly and removes its socket.
func TestIdentityProbeAndShutdown(t *testing.T) {
	c := harness.LoadCluster(t)
	good, err := os.ReadFile(c.ConfigFile)
	harness.Must(t, err, "cluster map")
	mapFile := filepath.Join(t.TempDir(), "clusters.json")
	harness.Must(t, os.WriteFile(mapFile, good, 0o644), "copy cluster map")
	p := harness.StartPlugin(t, c, "--mode", "controller", "--cluster-config", mapFile)
	id := p.Identity()

	info, err := id.GetPluginInfo(harness.Ctx(t), &csi.GetPluginInfoRequest{})
	harness.Must(t, err, "GetPluginInfo")
	if info.Name != "rbd.csi.rbdcsi.dev" || info.VendorVersion == "" {
		t.Fatalf("plugin info %+v", info)
	}
	caps, err := id.GetPluginCapabilities(harness.Ctx(t), &csi.GetPluginCapabilitiesRequest{})
	harness.Must(t, err, "GetPluginCapabilities")
	var controller, online, topology bool
	for _, cp := range caps.Capabilities {
		controller = controller || cp.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE
		online = online || cp.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_ONLINE
		// The controller places volumes of topologyConstrainedPools classes.
		topology = topology || cp.GetService().GetType() == csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS
	}
	if !controller || !online || !topology {
		t.Fatalf("capabilities %v", caps.Capabilities)
	}
	probe := func() error {
		_, err := id.Probe(harness.Ctx(t), &csi.ProbeRequest{})
		return err
	}
	harness.Must(t, probe(), "Probe")

	harness.Must(t, os.WriteFile(mapFile, []byte("not json"), 0o644), "break the cluster map")
	waitFor(t, "Probe to fail", func() bool { return probe() != nil })
	wantCode(t, probe(), codes.FailedPrecondition, "Probe with a broken cluster map")
	// The last good map still serves.
	env{c: c, p: p, cc: p.Controller()}.mustCreate(t, "probe-vol", mib)
	harness.Must(t, os.WriteFile(mapFile, good, 0o644), "mend the cluster map")
	waitFor(t, "Probe to recover", func() bool { return probe() == nil })

	p.Stop()
	if _, err := os.Stat(p.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket %s is left after SIGTERM: %v", p.Socket, err)
	}
	p.Start() // for the volume cleanup
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	waitWithin(t, what, 10*time.Second, ok)
}

func waitWithin(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
