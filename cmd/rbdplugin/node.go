package main

import (
	"errors"
	"flag"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/driver"
)

// nodeFlags are the flags only the node service uses.
type nodeFlags struct{}

func addNodeFlags(fs *flag.FlagSet) *nodeFlags {
	return &nodeFlags{}
}

// newNode builds the Node service.
func newNode(f flags, clusters *config.ClusterMap) (csi.NodeServer, []driver.HealthCheck, error) {
	return nil, nil, errors.New("the node service is not built yet: run with --mode controller")
}
