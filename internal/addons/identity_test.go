package addons_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

// The sidecar learns the driver's name and what this socket serves, and
// nothing it does not: a controller's socket replication, the offline
// reclaim and network fences; a node's the online reclaim. Probe follows
// the plugin's checks.
func TestIdentity(t *testing.T) {
	var broken error
	ready := func(context.Context) error { return broken }
	ceph := fake.New(fake.Options{})
	trim := func(context.Context, string, string) error { return nil }
	controller := []string{"service CONTROLLER_SERVICE", "replication VOLUME_REPLICATION", "reclaim OFFLINE", "fence NETWORK_FENCE", "fence GET_CLIENTS_TO_FENCE"}
	node := []string{"service NODE_SERVICE", "reclaim ONLINE"}
	for _, c := range []struct {
		what string
		o    addons.Options
		want []string
	}{
		{"controller", addons.Options{Backend: ceph, Fencer: ceph}, controller},
		{"node", addons.Options{NodeTrim: trim}, node},
		{"all", addons.Options{Backend: ceph, Fencer: ceph, NodeTrim: trim}, append(slices.Clone(controller), node...)},
	} {
		c.o.DriverName, c.o.Version, c.o.Ready = "rbd.csi.rbdcsi.dev", "v1", ready
		id := addons.New(c.o).Identity()
		got, err := id.GetIdentity(ctx(t), &identity.GetIdentityRequest{})
		if err != nil || got.Name != "rbd.csi.rbdcsi.dev" || got.VendorVersion != "v1" {
			t.Fatalf("%s: GetIdentity = %v, %v", c.what, got, err)
		}
		caps, err := id.GetCapabilities(ctx(t), &identity.GetCapabilitiesRequest{})
		must(t, err, "GetCapabilities")
		var have []string
		for _, cp := range caps.Capabilities {
			switch {
			case cp.GetService() != nil:
				have = append(have, "service "+cp.GetService().GetType().String())
			case cp.GetVolumeReplication() != nil:
				have = append(have, "replication "+cp.GetVolumeReplication().GetType().String())
			case cp.GetReclaimSpace() != nil:
				have = append(have, "reclaim "+cp.GetReclaimSpace().GetType().String())
			case cp.GetNetworkFence() != nil:
				have = append(have, "fence "+cp.GetNetworkFence().GetType().String())
			default:
				have = append(have, cp.String())
			}
		}
		slices.Sort(have)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(have, want) {
			t.Errorf("%s: capabilities %v, want %v", c.what, have, want)
		}
		broken = nil
		if p, err := id.Probe(ctx(t), &identity.ProbeRequest{}); err != nil || !p.Ready.GetValue() {
			t.Fatalf("%s: Probe = %v, %v", c.what, p, err)
		}
		broken = errors.New("cluster map does not load")
		_, err = id.Probe(ctx(t), &identity.ProbeRequest{})
		wantCode(t, err, codes.FailedPrecondition, "Probe with a broken cluster map")
	}
}
