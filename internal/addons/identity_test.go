package addons_test

import (
	"context"
	"errors"
	"testing"

	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
)

// The sidecar learns the driver's name and that it replicates volumes,
// and nothing this socket does not serve; Probe follows the plugin's
// checks.
func TestIdentity(t *testing.T) {
	var broken error
	id := addons.New(addons.Options{DriverName: "rbd.csi.rbdcsi.dev", Version: "v1", Ready: func(context.Context) error { return broken }}).Identity()
	got, err := id.GetIdentity(ctx(t), &identity.GetIdentityRequest{})
	if err != nil || got.Name != "rbd.csi.rbdcsi.dev" || got.VendorVersion != "v1" {
		t.Fatalf("GetIdentity = %v, %v", got, err)
	}
	caps, err := id.GetCapabilities(ctx(t), &identity.GetCapabilitiesRequest{})
	must(t, err, "GetCapabilities")
	var services, replication int
	for _, c := range caps.Capabilities {
		switch {
		case c.GetService().GetType() == identity.Capability_Service_CONTROLLER_SERVICE:
			services++
		case c.GetVolumeReplication().GetType() == identity.Capability_VolumeReplication_VOLUME_REPLICATION:
			replication++
		default:
			t.Errorf("advertises %v, which this socket does not serve", c)
		}
	}
	if services != 1 || replication != 1 {
		t.Errorf("capabilities %v: want the controller service and volume replication", caps.Capabilities)
	}
	if p, err := id.Probe(ctx(t), &identity.ProbeRequest{}); err != nil || !p.Ready.GetValue() {
		t.Fatalf("Probe = %v, %v", p, err)
	}
	broken = errors.New("cluster map does not load")
	_, err = id.Probe(ctx(t), &identity.ProbeRequest{})
	wantCode(t, err, codes.FailedPrecondition, "Probe with a broken cluster map")
}
