package main

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/driver"
)

// checkAddonsEndpoint: the csi-addons services work beside the controller
// (replication is a controller's job); the node serves none of them yet.
func checkAddonsEndpoint(f flags) error {
	if f.addonsEndpoint == "" {
		return nil
	}
	if f.mode == "node" {
		return fmt.Errorf("--csi-addons-endpoint: the csi-addons services are served in controller and all modes, not in node mode")
	}
	if f.addonsEndpoint == f.endpoint {
		return fmt.Errorf("--csi-addons-endpoint must differ from --endpoint: the csi-addons services have a socket of their own")
	}
	return checkEndpoint("--csi-addons-endpoint", f.addonsEndpoint, f.remoteTCP)
}

// startAddons serves the csi-addons services on --csi-addons-endpoint
// until ctx ends, sharing the controller's locks; stop is called with the
// error when the server stops by itself. Nothing without the flag.
func startAddons(ctx context.Context, f flags, w wiring, stop func(error)) (func(), error) {
	if f.addonsEndpoint == "" || f.mode == "node" {
		return func() {}, nil
	}
	var cred *cluster.Credentials
	if f.secretDir != "" {
		c, err := cluster.CredentialsFromDir(f.secretDir)
		if err != nil {
			return nil, err
		}
		cred = &c
	}
	svc := addons.New(addons.Options{
		Backend: w.backend, Clusters: w.clusters, Credentials: cred, Locks: w.locks,
		Names:      records.NewNames(f.ctrl.InstanceID, f.ctrl.VolumeNamePrefixes),
		DriverName: f.driverName, Version: version,
		Ready: func(context.Context) error { return w.clusters.Health() },
	})
	l, cleanup, err := driver.Listen(f.addonsEndpoint)
	if err != nil {
		return nil, fmt.Errorf("--csi-addons-endpoint: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := driver.NewServerWith(svc.Register, w.interceptors...).Serve(ctx, l, f.grace)
		if err != nil {
			stop(fmt.Errorf("csi-addons server: %w", err))
		}
	}()
	klog.InfoS("serving csi-addons", "endpoint", f.addonsEndpoint)
	return func() { <-done; cleanup() }, nil
}
