package controller

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// wantHealth asks the plugin for the volume's health and wants exactly
// the conditions given, as "STATUS Reason".
func wantHealth(t *testing.T, e env, volumeID string, want ...string) {
	t.Helper()
	resp, err := e.cc.ControllerGetVolumeHealth(harness.Ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: volumeID})
	harness.Must(t, err, "ControllerGetVolumeHealth")
	var got []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		got = append(got, h.GetStatus().String()+" "+h.GetReason())
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") || resp.GetVolumeHealth().GetVolumeId() != volumeID {
		t.Fatalf("health of %s: %v, want %q", volumeID, resp.GetVolumeHealth(), want)
	}
}

// A volume whose image was removed behind the driver is reported
// inaccessible; a healthy one has no condition.
func TestVolumeHealthOfAMissingImage(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "health", 4*mib)
	wantHealth(t, e, v.VolumeId)
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	spec := e.c.Pool + "/"
	if e.c.Namespace != "" {
		spec += e.c.Namespace + "/"
	}
	if out, err := e.c.RBD("rm", "--no-progress", spec+image); err != nil {
		t.Fatalf("rbd rm behind the driver: %v: %s", err, out)
	}
	wantHealth(t, e, v.VolumeId, "INACCESSIBLE ImageMissing")
}
