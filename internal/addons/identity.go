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
	// What this socket serves: the controller's services (replication,
	// the offline reclaim), network fences, the node's (the online
	// reclaim).
	controller, fence, node bool
}

// GetIdentity names the driver, as the CSI Identity service does.
func (i *Identity) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: i.name, VendorVersion: i.version}, nil
}

// GetCapabilities offers what this socket serves and nothing else: the
// csi-addons controller sends a node plugin's socket the calls of a
// volume staged there only when it says NODE_SERVICE and ONLINE, and a
// controller's the rest.
func (i *Identity) GetCapabilities(context.Context, *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	var caps []*identity.Capability
	service := func(t identity.Capability_Service_Type) {
		caps = append(caps, &identity.Capability{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{Type: t}}})
	}
	reclaim := func(t identity.Capability_ReclaimSpace_Type) {
		caps = append(caps, &identity.Capability{Type: &identity.Capability_ReclaimSpace_{ReclaimSpace: &identity.Capability_ReclaimSpace{Type: t}}})
	}
	if i.controller {
		service(identity.Capability_Service_CONTROLLER_SERVICE)
		caps = append(caps, &identity.Capability{Type: &identity.Capability_VolumeReplication_{VolumeReplication: &identity.Capability_VolumeReplication{
			Type: identity.Capability_VolumeReplication_VOLUME_REPLICATION,
		}}})
		reclaim(identity.Capability_ReclaimSpace_OFFLINE)
	}
	if i.fence {
		for _, t := range []identity.Capability_NetworkFence_Type{identity.Capability_NetworkFence_NETWORK_FENCE, identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE} {
			caps = append(caps, &identity.Capability{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: t}}})
		}
	}
	if i.node {
		service(identity.Capability_Service_NODE_SERVICE)
		reclaim(identity.Capability_ReclaimSpace_ONLINE)
	}
	return &identity.GetCapabilitiesResponse{Capabilities: caps}, nil
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
