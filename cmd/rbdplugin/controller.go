package main

import (
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// startController builds the Controller service from the flags: its own
// credentials (--controller-secret-dir) for the calls that carry none,
// the node registry, and the KMS configuration with the Secret its KEK
// rotation reads. Close stops its upkeep.
func startController(f flags, w wiring) (*controller.Controller, error) {
	var cred *cluster.Credentials
	if f.secretDir != "" {
		c, err := cluster.CredentialsFromDir(f.secretDir)
		if err != nil {
			return nil, err
		}
		cred = &c
	}
	nodes, err := f.registry.controllerRegistry(w.clusters, w.backend, cred)
	if err != nil {
		return nil, err
	}
	o := f.ctrl
	o.Backend, o.Clusters, o.Credentials, o.Fault, o.Upkeep = w.backend, w.clusters, cred, w.fault, w.obs.upkeep
	o.KMS, o.Locks = w.kms, w.locks
	if dir := f.secretDir; dir != "" && w.kms != nil {
		// Re-read at every pass: a rotation adds a KEK to the Secret.
		o.KMSSecrets = func() (map[string]string, error) { return kms.SecretsFromDir(dir) }
	}
	if nodes != nil {
		o.Nodes = nodes
	}
	return controller.New(o), nil
}
