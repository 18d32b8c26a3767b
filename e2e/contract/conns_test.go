package contract

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

// Closing the connection cache while a call its request gave up on still
// runs in librados (as at the plugin's shutdown, with a background sweep
// cut off) must not shut the connection down under that op: librados
// would abort the process (FAILED ceph_assert(initialized) in the
// Objecter). Close waits for the op, which its timeout bounds.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	c := harness.LoadCluster(t)
	conns := ceph.NewConns(ceph.Options{OpTimeout: 3 * time.Second, IdleTimeout: time.Minute})
	backend := ceph.NewBackend(conns, ceph.BackendOptions{})
	pool := rbd.Pool{MonHost: c.MonHost, Cred: cluster.Credentials{ID: c.CSIUser, Key: c.CSIKey}, Name: c.Pool, Namespace: c.Namespace}
	if _, err := backend.ListImages(harness.Ctx(t), pool); err != nil {
		t.Fatalf("ListImages before the outage: %v", err)
	}
	resume := harness.PauseOSDs(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := backend.ListImages(ctx, pool); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ListImages with the OSDs stopped: %v, want the request's deadline", err)
	}
	closed := make(chan struct{})
	go func() { conns.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was still running on its connection")
	case <-time.After(time.Second):
	}
	resume()
	<-closed
	if n := conns.Len(); n != 0 {
		t.Errorf("%d connections left after Close", n)
	}
}
