package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/node"
)

// startTrimmer gives freed blocks back to Ceph: it trims the node's staged
// filesystems every interval (0: not on its own) and at each SIGUSR1 (an
// admin's `kill -USR1`, or `kubectl exec ... kill -USR1 1`). Runs never
// overlap; a signal during a run asks for one more. stop waits for a run
// in progress to end.
func startTrimmer(ctx context.Context, n *node.Node, every time.Duration, obs node.TrimObserver) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var tick <-chan time.Time // nil: never
		if every > 0 {
			t := time.NewTicker(every)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				klog.InfoS("trimming staged filesystems", "reason", "SIGUSR1")
			case <-tick:
				klog.V(2).InfoS("trimming staged filesystems", "reason", "interval", "interval", every)
			}
			results := n.TrimAll(ctx, obs)
			klog.InfoS("trimmed staged filesystems", "volumes", len(results))
		}
	}()
	return func() {
		signal.Stop(usr1)
		cancel()
		wg.Wait()
	}
}
