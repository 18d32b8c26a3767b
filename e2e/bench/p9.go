package main

// P9, many nodes: the node registry (internal/nodereg) with -nodes
// simulated nodes heartbeating at the deployed interval against 1 node.
// The heartbeats are the node plugin's own code (nodereg.Registry.Run)
// in this process, one goroutine per node, through internal/rbd/ceph;
// ControllerPublishVolume goes through the plugin.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

type p9Phase struct {
	Nodes       int       `json:"nodes"`
	Beats       float64   `json:"heartbeat_writes"`
	WindowS     float64   `json:"window_s"`
	OSDOps      int64     `json:"osd_ops_in_window"`
	PublishMs   []float64 `json:"publish_ms"`
	UnpublishMs []float64 `json:"unpublish_ms"`
	ObjectBytes int       `json:"registry_omap_bytes"`
}

func (ph p9Phase) opsPerSec() float64 { return ph.Beats / ph.WindowS }

func (b *bench) runP9(ctx context.Context) error {
	iv := b.cfg.heartbeat
	b.logf("P9: %d nodes heartbeating every %s vs 1", b.cfg.nodes, iv)
	secrets, err := b.secretDir()
	if err != nil {
		return err
	}
	ctrl, err := b.startPlugin("registry", "--mode", "controller", "--v", "2", "--controller-secret-dir", secrets,
		"--node-registry", b.c.ClusterID+"/"+b.c.Pool, "--reclaim-sweep-interval", "0")
	if err != nil {
		return err
	}
	defer ctrl.retire()
	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	obs := &rawObserver{ops: opStats{}}
	reg := nodereg.New(ceph.NewBackend(conns, ceph.BackendOptions{Observer: obs}), b.pool, "", 2*time.Minute)
	defer func() {
		if _, err := b.c.admin(context.Background(), "rados", "-p", b.c.Pool, "rm", nodereg.Object); err != nil {
			b.logf("P9: removing the registry object: %v", err)
		}
	}()
	hbCtx, stopBeats := context.WithCancel(ctx)
	var beating sync.WaitGroup
	defer func() { stopBeats(); beating.Wait() }()
	node := func(i int) string { return fmt.Sprintf("bench-node-%05d", i) }
	start := func(from, to int) {
		for i := from; i < to; i++ {
			beating.Add(1)
			go func() { defer beating.Done(); reg.Run(hbCtx, nodereg.Node{ID: node(i)}, iv) }()
			if to-from > 1 {
				// Spread over one interval, as nodes started at random
				// times beat.
				time.Sleep(iv / time.Duration(to-from))
			}
		}
	}
	cc := ctrl.controller()
	vols := make([]string, b.cfg.publishes)
	for i := range vols {
		v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p9-%d", b.runID, i), gib, "ext4", nil)
		if err != nil {
			return err
		}
		vols[i] = v.VolumeId
	}
	defer func() {
		for _, id := range vols {
			if err := b.deleteVolume(context.Background(), cc, id); err != nil {
				b.logf("P9: %v", err)
			}
		}
	}()
	phase := func(nodes int) (p9Phase, error) {
		ph := p9Phase{Nodes: nodes}
		// One interval after the last node started, every node beats
		// once per interval.
		time.Sleep(time.Second)
		osd0, err := b.osdOps(ctx)
		if err != nil {
			return ph, err
		}
		n0, t0 := obs.snapshot()["SetOmap"][0], time.Now()
		select {
		case <-time.After(iv):
		case <-ctx.Done():
			return ph, ctx.Err()
		}
		ph.Beats, ph.WindowS = obs.snapshot()["SetOmap"][0]-n0, time.Since(t0).Seconds()
		osd1, err := b.osdOps(ctx)
		if err != nil {
			return ph, err
		}
		ph.OSDOps = osd1 - osd0
		kv, err := b.raw.ListOmap(ctx, b.pool, nodereg.Object, "")
		if err != nil {
			return ph, err
		}
		for k, v := range kv {
			ph.ObjectBytes += len(k) + len(v)
		}
		for _, id := range vols {
			req := &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node(0), VolumeCapability: mountCap("ext4"), Secrets: b.c.secrets()}
			cctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
			t := time.Now()
			_, err := cc.ControllerPublishVolume(cctx, req)
			ph.PublishMs = append(ph.PublishMs, float64(time.Since(t).Microseconds())/1000)
			cancel()
			if err != nil {
				return ph, fmt.Errorf("ControllerPublishVolume with %d nodes: %w", nodes, err)
			}
		}
		for _, id := range vols {
			cctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
			t := time.Now()
			_, err := cc.ControllerUnpublishVolume(cctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node(0), Secrets: b.c.secrets()})
			ph.UnpublishMs = append(ph.UnpublishMs, float64(time.Since(t).Microseconds())/1000)
			cancel()
			if err != nil {
				return ph, fmt.Errorf("ControllerUnpublishVolume with %d nodes: %w", nodes, err)
			}
		}
		b.logf("P9 %d nodes: %.0f heartbeat writes in %.1f s (%.2f/s; %d OSD ops), registry %d bytes, publish median %.1f ms",
			nodes, ph.Beats, ph.WindowS, ph.opsPerSec(), ph.OSDOps, ph.ObjectBytes, median(ph.PublishMs))
		return ph, nil
	}
	start(0, 1)
	one, err := phase(1)
	if err != nil {
		return err
	}
	b.logf("P9: starting %d more nodes over one interval (%s)", b.cfg.nodes-1, iv)
	start(1, b.cfg.nodes)
	many, err := phase(b.cfg.nodes)
	b.rep.Details["p9"] = []p9Phase{one, many}
	if err != nil {
		return err
	}
	// Per node and interval: the rate per node, in a unit that reads.
	perNode := func(ph p9Phase) float64 { return ph.opsPerSec() * iv.Seconds() / float64(ph.Nodes) }
	b.rep.add(keyP9Ops, vs(fmt.Sprintf("heartbeat writes per node per interval, %d nodes every %s vs 1 (%.1f/s in all; the OSDs served %.1f vs %.1f ops/s, the controller's and Ceph's own included)",
		b.cfg.nodes, iv, many.opsPerSec(), float64(many.OSDOps)/many.WindowS, float64(one.OSDOps)/one.WindowS), "writes", perNode(many), perNode(one), "1 node"))
	b.rep.add(keyP9Publish, vs(fmt.Sprintf("ControllerPublishVolume latency, %d nodes vs 1 (median of %d; unpublish %.1f vs %.1f ms)",
		b.cfg.nodes, b.cfg.publishes, median(many.UnpublishMs), median(one.UnpublishMs)), "ms", median(many.PublishMs), median(one.PublishMs), "1 node"))
	b.rep.add(keyP9Size, vs(fmt.Sprintf("node registry omap bytes per node, %d nodes (%.1f KiB) vs 1", b.cfg.nodes, float64(many.ObjectBytes)/1024),
		"bytes", float64(many.ObjectBytes)/float64(many.Nodes), float64(one.ObjectBytes), "1 node"))
	return nil
}
