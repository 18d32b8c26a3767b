package addons

import (
	"context"

	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Identity is the csi-addons Identity service: who serves the socket and
// what it offers, which the csi-addons sidecar reads once at start.
type Identity struct {
	identity.UnimplementedIdentityServer

	name, version string
	ready         func(context.Context) error
}

// GetIdentity names the driver, as the CSI Identity service does.
func (i *Identity) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: i.name, VendorVersion: i.version}, nil
}

// GetCapabilities offers the controller service and volume replication,
// nothing else this socket does not serve.
func (i *Identity) GetCapabilities(context.Context, *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	return &identity.GetCapabilitiesResponse{Capabilities: []*identity.Capability{
		{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{Type: identity.Capability_Service_CONTROLLER_SERVICE}}},
		{Type: &identity.Capability_VolumeReplication_{VolumeReplication: &identity.Capability_VolumeReplication{
			Type: identity.Capability_VolumeReplication_VOLUME_REPLICATION,
		}}},
	}}, nil
}

// Probe is ready when the plugin's own checks pass (the cluster map).
func (i *Identity) Probe(ctx context.Context, _ *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	if i.ready != nil {
		if err := i.ready(ctx); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "not ready: %v", err)
		}
	}
	return &identity.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
