//go:build e2e_k8s

package k8s

import (
	"flag"
	"sync"
	"testing"
)

// The order of a pass: the tests that call neither scenario nor final
// run first, one at a time, in file order (the install, TestAAInstallGuide;
// a Helm upgrade, which restarts the driver); then the scenarios, side by
// side, each in a namespace of its own (they spend most of their time
// waiting on pods, claims and snapshots); last the final checks, one after
// the other, once every scenario and its cleanup has ended. go test starts
// parallel tests only after every sequential one, so the final checks are
// parallel tests that wait.
//
// This is the state of one run of the test binary, as go test's own
// ordering is.
var order struct {
	scenarios sync.WaitGroup
	mu        sync.Mutex
	last      chan struct{} // closed when the latest final check has ended
}

// minParallel is the least -test.parallel a pass can run with: each final
// check holds a slot while it waits, and the scenarios need at least one.
// scripts/k8s-e2e.sh sets more.
const minParallel = 3

// scenario runs t beside the other scenarios, after the sequential tests
// and before the final checks. Call it first, so that the test's own
// cleanups (its namespace) end before the final checks begin.
func scenario(t *testing.T) {
	order.scenarios.Add(1)
	t.Cleanup(order.scenarios.Done)
	t.Parallel()
}

// final runs t after every scenario, and after the final checks before it
// in file order.
func final(t *testing.T) {
	t.Helper()
	if p := flag.Lookup("test.parallel"); p == nil || p.Value.(flag.Getter).Get().(int) < minParallel {
		t.Fatalf("the final checks need -test.parallel %d or more (they wait in a slot of their own for the scenarios)", minParallel)
	}
	order.mu.Lock()
	before := order.last
	done := make(chan struct{})
	order.last = done
	order.mu.Unlock()
	t.Cleanup(func() { close(done) })
	t.Parallel()
	order.scenarios.Wait()
	if before != nil {
		<-before
	}
}
