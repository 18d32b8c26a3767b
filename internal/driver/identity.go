package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// HealthCheck returns nil when one part of the plugin can serve.
type HealthCheck func(ctx context.Context) error

// Identity is the CSI Identity service.
type Identity struct {
	csi.UnimplementedIdentityServer

	name, version string
	controller    bool
	checks        []HealthCheck
}

// NewIdentity returns the Identity service; checks decide Probe's answer.
func NewIdentity(name, version string, controller bool, checks ...HealthCheck) *Identity {
	return &Identity{name: name, version: version, controller: controller, checks: checks}
}

// GetPluginInfo names the driver.
func (i *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: i.version}, nil
}

// GetPluginCapabilities advertises the controller service (when this
// process runs one) and online expansion.
func (i *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE,
		}},
	}}}
	if i.controller {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
				Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
			}},
		})
	}
	return resp, nil
}

// Probe runs every health check; the first failure makes the plugin not
// ready and says why.
func (i *Identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	for _, check := range i.checks {
		if err := check(ctx); err != nil {
			klog.V(2).InfoS("probe failed", "err", err)
			return nil, status.Errorf(codes.FailedPrecondition, "not ready: %v", err)
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
