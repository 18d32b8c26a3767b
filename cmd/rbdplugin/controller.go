package main

import (
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// startController builds the Controller service from the flags: its own
// credentials (--controller-secret-dir) for the calls that carry none,
// the node registry, and the KMS configuration with the KEK Secrets its
// rotation reads (--kms-secret-dir). Close stops its upkeep.
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
	if dir := f.kmsSecretDir; dir != "" && w.kms != nil {
		// Re-read at every pass: a rotation adds a KEK to the Secret.
		o.KMSSecrets = func() (map[string]string, error) {
			s, err := kms.SecretsFromDir(dir)
			if o.AllowKEKsWithCredentials {
				s = kms.WithoutCredentials(s)
			}
			return s, err
		}
	}
	if nodes != nil {
		o.Nodes = nodes
	}
	return controller.New(o), nil
}
