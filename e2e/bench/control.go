package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	tib = int64(1) << 40
)

func mountCap(fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
	}
}

// createVolume calls CreateVolume as the external-provisioner would and
// records the volume for cleanup.
func (b *bench) createVolume(ctx context.Context, cc csi.ControllerClient, name string, size int64, fs string, src *csi.VolumeContentSource) (*csi.Volume, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
	defer cancel()
	resp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(fs)}, Parameters: b.c.params(), Secrets: b.c.secrets(),
		VolumeContentSource: src,
	})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	b.led.addVolume(resp.Volume.VolumeId, cc)
	return resp.Volume, nil
}

func (b *bench) deleteVolume(ctx context.Context, cc csi.ControllerClient, id string) error {
	return b.deleteVolumeWithin(ctx, cc, id, b.cfg.callTimeout)
}

// deleteVolumeWithin is deleteVolume with its own deadline: a big thin
// image without object-map takes long to remove (every object is tried).
func (b *bench) deleteVolumeWithin(ctx context.Context, cc csi.ControllerClient, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: b.c.secrets()}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", id, err)
	}
	b.led.dropVolume(id)
	return nil
}

// side is one way of creating and removing N volumes: the raw go-ceph
// baseline or a plugin over its socket.
type side struct {
	name   string
	create func(ctx context.Context, tag string, i int) error
	remove func(ctx context.Context, tag string, i int) error
	// ops reads the Ceph operations done so far (counts and seconds).
	ops func(ctx context.Context) (opStats, error)
}

// rawSide is the raw limit: what CreateVolume and DeleteVolume must do in
// Ceph at the least (create the image, set the one metadata key; remove
// the image), through internal/rbd/ceph, the package the plugin uses, in this
// process and on the same pool and user.
func (b *bench) rawSide(size int64) side {
	return b.rawSideNamed("raw", size, false)
}

// rawCheckedSide is the raw limit of a delete that looks before it
// removes: the image read that DeleteVolume must do (attachments,
// watchers, snapshots, parent) and then the removal, through the same
// package. The driver cannot do less and stay safe; the raw side's
// removal alone is the floor no checking delete reaches.
func (b *bench) rawCheckedSide(size int64) side {
	return b.rawSideNamed("raw-checked", size, true)
}

func (b *bench) rawSideNamed(sideName string, size int64, check bool) side {
	name := func(tag string, i int) (string, string) {
		req := fmt.Sprintf("bench-%s-%s-%s-%d", b.runID, sideName, tag, i)
		sum := sha256.Sum256([]byte(req))
		return "csi-raw-" + hex.EncodeToString(sum[:10]), req
	}
	return side{
		name: sideName,
		ops:  func(context.Context) (opStats, error) { return b.rawOps.snapshot(), nil },
		create: func(ctx context.Context, tag string, i int) error {
			img, req := name(tag, i)
			b.led.addRaw(img)
			ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
			defer cancel()
			return b.raw.CreateImage(ctx, b.pool, img, rbd.ImageSpec{
				Size: uint64(size), Features: b.c.features(), Metadata: map[string]string{"rbdcsi.name": req},
			})
		},
		remove: func(ctx context.Context, tag string, i int) error {
			img, _ := name(tag, i)
			ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
			defer cancel()
			if check {
				if _, err := b.raw.StatFamily(ctx, b.pool, img, ""); err != nil {
					return err
				}
			}
			if err := b.raw.RemoveImage(ctx, b.pool, img); err != nil {
				return err
			}
			b.led.dropRaw(img)
			return nil
		},
	}
}

// pluginSide creates and deletes volumes through a plugin's socket.
func (b *bench) pluginSide(name string, p *plugin, size int64) side {
	var mu sync.Mutex
	ids := map[string]string{}
	key := func(tag string, i int) string { return fmt.Sprintf("bench-%s-%s-%s-%d", b.runID, name, tag, i) }
	cc := p.controller()
	ops := func(ctx context.Context) (opStats, error) { return scrapeOps(ctx, p.metricsAddr) }
	if p.metricsAddr == "" {
		ops = func(context.Context) (opStats, error) { return opStats{}, nil }
	}
	return side{
		name: name,
		ops:  ops,
		create: func(ctx context.Context, tag string, i int) error {
			v, err := b.createVolume(ctx, cc, key(tag, i), size, "ext4", nil)
			if err != nil {
				return err
			}
			mu.Lock()
			ids[key(tag, i)] = v.VolumeId
			mu.Unlock()
			return nil
		},
		remove: func(ctx context.Context, tag string, i int) error {
			mu.Lock()
			id := ids[key(tag, i)]
			delete(ids, key(tag, i))
			mu.Unlock()
			return b.deleteVolume(ctx, cc, id)
		},
	}
}

// provisionRun is one side's N creates then N deletes at one concurrency.
type provisionRun struct {
	Side         string  `json:"side"`
	Concurrency  int     `json:"concurrency"`
	Round        int     `json:"round"`
	N            int     `json:"n"`
	CreatePerSec float64 `json:"create_per_s"`
	DeletePerSec float64 `json:"delete_per_s"`
	// ReclaimPerSec counts the deletes until the storage is gone from the
	// pool (no image, trash entry, rbd task or RBD object left).
	ReclaimPerSec float64 `json:"reclaim_per_s"`
	ReclaimWaitS  float64 `json:"reclaim_wait_s"`
	// Where the time went: CPU per call by process, and the Ceph
	// operations behind each call.
	CreateCPU cpuUse           `json:"create_cpu"`
	DeleteCPU cpuUse           `json:"delete_cpu"`
	CreateOps map[string]opUse `json:"create_ceph_ops"`
	DeleteOps map[string]opUse `json:"delete_ceph_ops"`
	// Load is the machine's load average at the start and the end.
	Load *loadSpan `json:"load"`
}

// phaseProfiler records the creates and the deletes of one provision run
// under perf, each phase apart: their costs differ (a delete's read) and
// one profile of both hides which phase a difference comes from.
type phaseProfiler struct {
	b    *bench
	pid  int
	side string
	c    int
	cur  *profiler
}

func (p *phaseProfiler) start(phase string) error {
	if p == nil {
		return nil
	}
	if err := os.MkdirAll(p.b.cfg.out, 0o755); err != nil {
		return err
	}
	var err error
	p.cur, err = startPerf(p.pid, filepath.Join(p.b.cfg.out, fmt.Sprintf("bench-%s-perf-%s-c%d-%s.data", p.b.stamp, p.side, p.c, phase)))
	return err
}

func (p *phaseProfiler) stop(phase string) {
	if p == nil || p.cur == nil {
		return
	}
	sum, err := p.cur.stop()
	p.cur = nil
	if err != nil {
		p.b.logf("  perf: %v", err)
	}
	p.b.rep.Details[fmt.Sprintf("perf_%s_c%d_%s", p.side, p.c, phase)] = sum
	if len(sum.ByDSO) > 0 {
		p.b.logf("  perf %s c=%d %s, %s, by shared object: %s", p.side, p.c, phase, sum.Samples, strings.Join(sum.ByDSO[:min(6, len(sum.ByDSO))], ", "))
	}
}

func (b *bench) provision(ctx context.Context, s side, c, round int, prof *phaseProfiler) (provisionRun, error) {
	tag := fmt.Sprintf("c%d-r%d", c, round)
	n := b.cfg.n
	r := provisionRun{Side: s.name, Concurrency: c, Round: round, N: n, Load: newLoadSpan()}
	defer r.Load.sample()
	ops0, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	if err := prof.start("create"); err != nil {
		return r, err
	}
	cpu0 := b.watch.sample()
	took, err := runOps(ctx, n, c, func(ctx context.Context, i int) error { return s.create(ctx, tag, i) })
	prof.stop("create")
	if err != nil {
		return r, fmt.Errorf("%s creates at c=%d: %w", s.name, c, err)
	}
	cpu1 := b.watch.sample()
	r.CreatePerSec = float64(n) / took.Seconds()
	r.CreateCPU = cpu1.since(cpu0, n)
	ops1, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	r.CreateOps = ops1.since(ops0, n)

	if err := prof.start("delete"); err != nil {
		return r, err
	}
	cpu1 = b.watch.sample()
	took, err = runOps(ctx, n, c, func(ctx context.Context, i int) error { return s.remove(ctx, tag, i) })
	prof.stop("delete")
	if err != nil {
		return r, fmt.Errorf("%s deletes at c=%d: %w", s.name, c, err)
	}
	cpu2 := b.watch.sample()
	r.DeletePerSec = float64(n) / took.Seconds()
	r.DeleteCPU = cpu2.since(cpu1, n)
	gone, err := b.waitPoolClean(ctx, 2*time.Minute)
	if err != nil {
		return r, fmt.Errorf("%s deletes at c=%d: %w", s.name, c, err)
	}
	// Gone at the first look: the deletes' own wall time counts.
	total := max(took, gone.Sub(cpu1.at))
	r.ReclaimPerSec = float64(n) / total.Seconds()
	r.ReclaimWaitS = (total - took).Seconds()
	ops2, err := s.ops(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: reading Ceph operation metrics: %w", s.name, err)
	}
	r.DeleteOps = ops2.since(ops1, n)
	return r, nil
}

// waitPoolClean polls until the pool holds no image, trash entry, pending
// rbd task or RBD image object, and returns when it first saw that: the
// deletes' return if the first look finds it clean.
func (b *bench) waitPoolClean(ctx context.Context, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	first := true
	for {
		at := time.Now()
		left, err := b.poolContents(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if len(left) == 0 {
			if first {
				return at, nil
			}
			return time.Now(), nil
		}
		first = false
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("storage not reclaimed %s after the deletes: %s", limit, strings.Join(left, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// poolContents lists what is left in the pool: images, trash entries,
// rbd_support tasks (the mgr's background removals) and RBD objects.
func (b *bench) poolContents(ctx context.Context) ([]string, error) {
	type res struct {
		what, out string
		err       error
	}
	cmds := []struct {
		what, tool string
		args       []string
	}{
		{"images", "rbd", []string{"ls", "-p", b.c.Pool, "--format", "json"}},
		{"trash", "rbd", []string{"trash", "ls", "-p", b.c.Pool, "--format", "json"}},
		{"rbd tasks", "ceph", []string{"rbd", "task", "list", "--format", "json"}},
		{"objects", "rados", []string{"-p", b.c.Pool, "ls"}},
	}
	out := make([]res, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// runs: rbd ceph rados
			o, err := b.c.admin(ctx, cmd.tool, cmd.args...)
			out[i] = res{cmd.what, o, err}
		}()
	}
	wg.Wait()
	var left []string
	for _, r := range out {
		if r.err != nil {
			return nil, r.err
		}
		switch r.what {
		case "objects":
			var objs []string
			for _, o := range strings.Fields(r.out) {
				if strings.HasPrefix(o, "rbd_data.") || strings.HasPrefix(o, "rbd_header.") || strings.HasPrefix(o, "rbd_id.") {
					objs = append(objs, o)
				}
			}
			if len(objs) > 0 {
				left = append(left, fmt.Sprintf("%d RBD objects (%s...)", len(objs), objs[0]))
			}
		default:
			var list []json.RawMessage
			if err := json.Unmarshal([]byte(strings.TrimSpace(orEmpty(r.out))), &list); err != nil {
				return nil, fmt.Errorf("parsing %s: %w: %q", r.what, err, r.out)
			}
			if len(list) > 0 {
				left = append(left, fmt.Sprintf("%d %s (%s...)", len(list), r.what, list[0]))
			}
		}
	}
	return left, nil
}

func orEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "[]"
	}
	return s
}

// p1 runs P1 (provisioning), P2 (reclaim) and P6 (logging cost) in one
// interleaved loop, and measures P5's peak at the highest concurrency:
// every round runs each side in turn (the order rotating by round), so
// that drift on a noisy machine hits all sides alike.
func (b *bench) p1(ctx context.Context, quiet, verbose *plugin) ([]provisionRun, memStat, int64, error) {
	sides := []side{b.rawSide(b.cfg.size), b.rawCheckedSide(b.cfg.size), b.pluginSide("driver", quiet, b.cfg.size)}
	if b.gfloor != nil {
		sides = append(sides, b.pluginSide("grpc-floor", b.gfloor, b.cfg.size))
	}
	if verbose != nil {
		sides = append(sides, b.pluginSide("driver-v5", verbose, b.cfg.size))
	}
	var runs []provisionRun
	var peak memStat
	var sampled int64
	top := 0
	for _, c := range b.cfg.concurrency {
		top = max(top, c)
	}
	for _, c := range b.cfg.concurrency {
		var sampler *rssSampler
		if c == top {
			if err := resetPeak(quiet.pid()); err != nil {
				return nil, peak, 0, fmt.Errorf("resetting the plugin's VmHWM: %w", err)
			}
			if b.gfloor != nil {
				if err := resetPeak(b.gfloor.pid()); err != nil {
					return nil, peak, 0, fmt.Errorf("resetting the gRPC floor's VmHWM: %w", err)
				}
			}
			sampler = sampleRSS(quiet.pid(), 50*time.Millisecond)
		}
		for round := 0; round < b.cfg.rounds; round++ {
			for k := range sides {
				s := sides[(k+round)%len(sides)]
				var prof *phaseProfiler
				if b.cfg.perf && c == top && round == 0 && (s.name == "raw" || s.name == "driver" || s.name == "grpc-floor") {
					pid := quiet.pid()
					switch s.name {
					case "raw":
						pid = os.Getpid()
					case "grpc-floor":
						pid = b.gfloor.pid()
					}
					prof = &phaseProfiler{b: b, pid: pid, side: s.name, c: c}
				}
				r, err := b.provision(ctx, s, c, round, prof)
				if err != nil {
					if sampler != nil {
						sampler.finish()
					}
					return nil, peak, 0, err
				}
				proc := "plugin-" + s.name
				if strings.HasPrefix(s.name, "raw") {
					proc = "bench"
				}
				b.logf("  P1/P2 c=%-2d round %d %-11s create %6.1f/s (CPU ms/call: %s %.1f, osd %.1f, others %.1f)  delete %5.1f/s (%s %.1f, osd %.1f, others %.1f)  reclaimed %5.1f/s",
					c, round+1, s.name, r.CreatePerSec, proc, r.CreateCPU.MsPerOp[proc], r.CreateCPU.MsPerOp["ceph-osd"], r.CreateCPU.MsPerOp["others"],
					r.DeletePerSec, proc, r.DeleteCPU.MsPerOp[proc], r.DeleteCPU.MsPerOp["ceph-osd"], r.DeleteCPU.MsPerOp["others"], r.ReclaimPerSec)
				runs = append(runs, r)
			}
		}
		if sampler != nil {
			sampled = sampler.finish()
			var err error
			if peak, err = readMem(quiet.pid()); err != nil {
				return nil, peak, 0, err
			}
		}
	}
	return runs, peak, sampled, nil
}

// cycleMem is the plugin's memory after a number of create/delete cycles.
type cycleMem struct {
	Cycles int `json:"cycles"`
	memStat
}

// p5cycles runs create/delete cycles on the quiet plugin and reads its
// memory at ten checkpoints.
func (b *bench) p5cycles(ctx context.Context, p *plugin) ([]cycleMem, time.Duration, error) {
	s := b.pluginSide("driver", p, b.cfg.cycleSize)
	total, c := b.cfg.cycles, b.cfg.cycleConcurrency
	step := max(1, total/10)
	var out []cycleMem
	start := time.Now()
	for done := 0; done < total; {
		n := min(step, total-done)
		tag := fmt.Sprintf("cycle%d", done)
		_, err := runOps(ctx, n, c, func(ctx context.Context, i int) error {
			if err := s.create(ctx, tag, i); err != nil {
				return err
			}
			return s.remove(ctx, tag, i)
		})
		if err != nil {
			return out, 0, fmt.Errorf("create/delete cycles: %w", err)
		}
		done += n
		m, err := readMem(p.pid())
		if err != nil {
			return out, 0, err
		}
		out = append(out, cycleMem{Cycles: done, memStat: m})
		b.logf("  P5 %5d cycles: VmRSS %.1f MiB, %d threads, %d fds", done, m.rssMiB(), m.Threads, m.FDs)
	}
	return out, time.Since(start), nil
}

// warm makes the first Ceph connection of a plugin (one volume made and
// deleted) so that idle memory and the first timed call include it.
func (b *bench) warm(ctx context.Context, p *plugin) error {
	cc := p.controller()
	v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-warm-%s", b.runID, p.name), gib, "ext4", nil)
	if err != nil {
		return err
	}
	return b.deleteVolume(ctx, cc, v.VolumeId)
}

func (b *bench) warmRaw(ctx context.Context) error {
	s := b.rawSide(gib)
	if err := s.create(ctx, "warm", 0); err != nil {
		return err
	}
	return s.remove(ctx, "warm", 0)
}
