package main

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/addons"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/driver"
	"github.com/rbdcsi/rbdcsi/internal/node"
)

// checkAddonsEndpoint: the csi-addons services have a socket of their
// own, in every mode: a controller's serves replication, the offline
// reclaim and network fences, a node's the online reclaim (fstrim).
func checkAddonsEndpoint(f flags) error {
	if f.addonsEndpoint == "" {
		return nil
	}
	if f.addonsEndpoint == f.endpoint {
		return fmt.Errorf("--csi-addons-endpoint must differ from --endpoint: the csi-addons services have a socket of their own")
	}
	return checkEndpoint("--csi-addons-endpoint", f.addonsEndpoint, f.remoteTCP)
}

// startAddons serves the csi-addons services of the plugin's mode on
// --csi-addons-endpoint until ctx ends, sharing the controller's locks
// (n is the node service, nil in controller mode); stop is called with
// the error when the server stops by itself. Nothing without the flag.
func startAddons(ctx context.Context, f flags, w wiring, n *node.Node, stop func(error)) (func(), error) {
	if f.addonsEndpoint == "" {
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
	o := addons.Options{
		Clusters: w.clusters, Credentials: cred, Locks: w.locks,
		Names:      records.NewNames(f.ctrl.InstanceID, f.ctrl.VolumeNamePrefixes),
		DriverName: f.driverName, Version: version,
		Ready: func(context.Context) error { return w.clusters.Health() },
	}
	if f.mode != "node" {
		o.Backend, o.Fencer = w.backend, w.backend
	}
	if n != nil {
		o.NodeTrim = func(ctx context.Context, volumeID, stagingPath string) error {
			_, err := n.TrimVolume(ctx, volumeID, stagingPath)
			return err
		}
	}
	svc := addons.New(o)
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
	klog.InfoS("serving csi-addons", "endpoint", f.addonsEndpoint, "mode", f.mode)
	return func() { <-done; cleanup() }, nil
}
