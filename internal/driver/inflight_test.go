package driver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// At most max controller calls run at once, the others wait and then run;
// probes and node calls pass while every slot is taken; a call whose
// deadline ends while it waits never runs.
func TestLimitControllerCalls(t *testing.T) {
	const max = 3
	limit := LimitControllerCalls(max)
	release := make(chan struct{})
	var running, peak, ran atomic.Int32
	blocking := func(context.Context, any) (any, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		ran.Add(1)
		return nil, nil
	}
	create := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/CreateVolume"}
	var wg sync.WaitGroup
	for range max + 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := limit(context.Background(), nil, create, blocking); err != nil {
				t.Error(err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() < max && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if running.Load() != max {
		t.Fatalf("%d calls running, want %d", running.Load(), max)
	}

	quick := func(context.Context, any) (any, error) { return "ok", nil }
	for _, m := range []string{"/csi.v1.Identity/Probe", "/csi.v1.Node/NodeStageVolume", "/csi.v1.Controller/ControllerGetCapabilities", "/csi.v1.GroupController/GroupControllerGetCapabilities",
		"/identity.Identity/Probe", "/reclaimspace.ReclaimSpaceNode/NodeReclaimSpace"} {
		resp, err := limit(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: m}, quick)
		if resp != "ok" || err != nil {
			t.Errorf("%s waited for a controller slot: %v %v", m, resp, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	for _, m := range []string{"/csi.v1.GroupController/CreateVolumeGroupSnapshot", "/replication.Controller/PromoteVolume",
		"/reclaimspace.ReclaimSpaceController/ControllerReclaimSpace", "/fence.FenceController/FenceClusterNetwork"} {
		if _, err := limit(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, quick); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s past its deadline while waiting: %v, want DeadlineExceeded", m, err)
		}
	}

	close(release)
	wg.Wait()
	if peak.Load() != max || ran.Load() != max+4 {
		t.Errorf("at most %d ran at once (want %d), %d ran in all (want %d)", peak.Load(), max, ran.Load(), max+4)
	}
	if _, err := LimitControllerCalls(0)(context.Background(), nil, create, quick); err != nil {
		t.Errorf("no bound: %v", err)
	}
}
