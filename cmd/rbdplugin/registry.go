package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// registryFlags locate the node registry (see internal/nodereg).
type registryFlags struct {
	location      string
	ttl           time.Duration
	nodeSecretDir string
	instance      string // --instance-id
}

func addRegistryFlags(fs *flag.FlagSet) *registryFlags {
	r := &registryFlags{}
	fs.StringVar(&r.location, "node-registry", "", "clusterID/pool of the RADOS object where node plugins keep heartbeats; the controller attaches volumes only to nodes found there. Empty: no attachments (ControllerPublish is not offered)")
	fs.DurationVar(&r.ttl, "node-registry-ttl", 2*time.Minute, "a node whose last heartbeat is older than this is unknown to the controller; nodes beat every fifth of it")
	fs.StringVar(&r.nodeSecretDir, "node-secret-dir", "", "node: directory with userID and userKey files (a mounted Secret): the node plugin's own Ceph user, which writes its heartbeat and maps the volumes of calls whose secrets name no Ceph user (docs/install.md#3-the-ceph-users)")
	return r
}

func (r *registryFlags) pool(clusters *cluster.Map, cred cluster.Credentials) (rbd.Pool, error) {
	clusterID, pool, err := nodereg.ParseLocation(r.location)
	if err != nil {
		return rbd.Pool{}, err
	}
	cluster, err := clusters.Lookup(clusterID)
	if err != nil {
		return rbd.Pool{}, err
	}
	return rbd.NewPool(cluster, cred, pool), nil
}

// controllerRegistry is the registry the controller reads, or nil when
// none is configured.
func (r *registryFlags) controllerRegistry(clusters *cluster.Map, store nodereg.Store, cred *cluster.Credentials) (*nodereg.Registry, error) {
	if r.location == "" {
		return nil, nil
	}
	if cred == nil {
		return nil, errors.New("--node-registry needs --controller-secret-dir: the controller reads the registry with its own credentials")
	}
	p, err := r.pool(clusters, *cred)
	if err != nil {
		return nil, err
	}
	return nodereg.New(store, p, r.instance, r.ttl), nil
}

// nodeRegistry is the registry as a node plugin uses it, with the node
// user (--node-secret-dir): to keep its heartbeat, and to lift the fences
// the controller put on it. Nil without --node-registry.
func (r *registryFlags) nodeRegistry(clusters *cluster.Map, store nodereg.Store) (*nodereg.Registry, error) {
	if r.location == "" {
		return nil, nil
	}
	if r.nodeSecretDir == "" {
		return nil, errors.New("--node-registry needs --node-secret-dir in node mode: the node writes its heartbeat with those credentials")
	}
	cred, err := cluster.CredentialsFromDir(r.nodeSecretDir)
	if err != nil {
		return nil, err
	}
	p, err := r.pool(clusters, cred)
	if err != nil {
		return nil, err
	}
	return nodereg.New(store, p, r.instance, r.ttl), nil
}

// startHeartbeat keeps this node registered in reg (nil: no registry)
// until ctx ends; the returned function waits for it to deregister.
func (r *registryFlags) startHeartbeat(ctx context.Context, reg *nodereg.Registry, n nodereg.Node) (wait func(), err error) {
	if reg == nil {
		return func() {}, nil
	}
	// The first beat is synchronous, so the node is known as soon as it serves.
	bctx, cancel := context.WithTimeout(ctx, r.ttl/5)
	err = reg.Beat(bctx, n)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("the first heartbeat of node %s in the node registry %s (--node-registry, with the user of --node-secret-dir): %w", n.ID, r.location, err)
	}
	done := make(chan struct{})
	go func() { reg.Run(ctx, n, r.ttl/5); close(done) }()
	return func() { <-done }, nil
}
