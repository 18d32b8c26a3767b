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
	caps          Capabilities
	checks        []HealthCheck
}

// Capabilities are the plugin capabilities a process advertises besides
// online expansion.
type Capabilities struct {
	// Controller: the process serves the Controller service.
	Controller bool
	// GroupController: the process serves the GroupController service.
	GroupController bool
	// SnapshotMetadata: the process serves the SnapshotMetadata service.
	SnapshotMetadata bool
	// Topology: volumes may be accessible from part of the cluster only
	// (the controller places them by topology; a node reports its own).
	Topology bool
}

// NewIdentity returns the Identity service; checks decide Probe's answer.
func NewIdentity(name, version string, caps Capabilities, checks ...HealthCheck) *Identity {
	return &Identity{name: name, version: version, caps: caps, checks: checks}
}

// GetPluginInfo names the driver.
func (i *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: i.version}, nil
}

// GetPluginCapabilities advertises online expansion, and the controller
// services (Controller, GroupController, SnapshotMetadata) and topology
// where this process has them.
func (i *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE,
		}},
	}}}
	for _, c := range []struct {
		on bool
		t  csi.PluginCapability_Service_Type
	}{
		{i.caps.Controller, csi.PluginCapability_Service_CONTROLLER_SERVICE},
		{i.caps.GroupController, csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE},
		{i.caps.SnapshotMetadata, csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE},
		{i.caps.Topology, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS},
	} {
		if c.on {
			resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
				Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: c.t}},
			})
		}
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
