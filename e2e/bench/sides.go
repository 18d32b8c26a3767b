package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// controllerSides are the processes the controller scenarios compare:
// nil where the scenarios chosen need none.
type controllerSides struct {
	quiet, verbose, gfloor *plugin
	floor                  *floorProc
}

// startSides starts, in one order and through one launcher, every process
// the controller scenarios compare: the driver as the manifests run it
// (--v=2 and metrics), the driver at --v=5 for P6, the gRPC floor with the
// same flags (it ignores them), the floor for P5. None has talked to Ceph
// yet when this returns.
func (b *bench) startSides() (controllerSides, error) {
	var s controllerSides
	sc := b.cfg.scenarios
	args := []string{"--mode", "controller", "--v", "2"}
	var err error
	if s.quiet, err = b.startPlugin("driver", args...); err != nil {
		return s, err
	}
	if sc["P6"] {
		if s.verbose, err = b.startPlugin("driver-v5", "--mode", "controller", "--v", "5"); err != nil {
			return s, err
		}
	}
	if sc["P1"] || sc["P2"] || sc["P5"] {
		if s.gfloor, err = b.startPluginBin(b.cfg.grpcFloor, "grpc-floor", args...); err != nil {
			return s, fmt.Errorf("gRPC floor: %w", err)
		}
		s.gfloor.metricsAddr = "" // takes the flag, serves nothing
		b.gfloor = s.gfloor
	}
	if sc["P5"] {
		if s.floor, err = b.startFloor(); err != nil {
			return s, fmt.Errorf("P5 floor: %w", err)
		}
		b.floor = s.floor // stopped after P1, or by the teardown
		if err := b.recordSide(s.floor.proc); err != nil {
			return s, err
		}
		b.logf("started floor (pid %d)", s.floor.pid())
	}
	return s, nil
}

// warmSides makes every side's first Ceph connection the same way, in
// the order they started, after the raw sides': one 1 GiB volume created
// with its metadata key, read and removed, so that idle memory and the
// first timed call include it. Then all rest alike until P5 reads them.
func (b *bench) warmSides(ctx context.Context, s controllerSides) error {
	raw := b.rawCheckedSide(gib)
	if err := raw.create(ctx, "warm", 0); err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	if err := raw.remove(ctx, "warm", 0); err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	order := []string{"raw"}
	for _, p := range []*plugin{s.quiet, s.verbose, s.gfloor} {
		if p == nil {
			continue
		}
		cc := p.controller()
		v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-warm-%s", b.runID, p.name), gib, "ext4", nil)
		if err != nil {
			return err
		}
		if err := b.deleteVolume(ctx, cc, v.VolumeId); err != nil {
			return err
		}
		order = append(order, p.name)
	}
	if s.floor != nil {
		if err := b.warmFloor(s.floor); err != nil {
			return fmt.Errorf("P5 floor: %w", err)
		}
		order = append(order, "floor")
	}
	time.Sleep(restAfterWarmUp)
	b.sides.WarmUp = fmt.Sprintf("Warm-up, one side after the other (%s): one 1 GiB volume created with its metadata key, read and removed; then %s of rest for all before P5 reads their idle memory.",
		strings.Join(order, ", "), restAfterWarmUp)
	return nil
}

// restAfterWarmUp lets the warm-ups' frees and the allocators settle
// before idle memory is read.
const restAfterWarmUp = 2 * time.Second

func (b *bench) startPlugin(name string, args ...string) (*plugin, error) {
	return b.startPluginBin(b.cfg.plugin, name, args...)
}

// startPluginBin starts a CSI process through the sides' launcher and
// checks that it runs as the bench does.
func (b *bench) startPluginBin(bin, name string, args ...string) (*plugin, error) {
	p, err := startPlugin(bin, b.work, name, b.c, b.env, args...)
	if err != nil {
		return nil, err
	}
	b.plugins = append(b.plugins, p)
	b.watch.pids["plugin-"+name] = []int{p.pid()}
	b.logf("started plugin %s (pid %d): %s", name, p.pid(), strings.Join(args, " "))
	if err := b.recordSide(p.proc); err != nil {
		return nil, err
	}
	return p, nil
}

// recordSide adds a started process to the results' account of the
// sides; it fails the run if the process does not run as the bench does.
func (b *bench) recordSide(p *proc) error {
	info, err := inspect(p.pid(), b.cfg.gomaxprocs)
	if err != nil {
		return fmt.Errorf("reading how %s runs: %w", p.name, err)
	}
	info.Name = p.name
	info.Runs = strings.ReplaceAll(strings.Join(p.argv, " "), b.work, "$WORK")
	return b.sides.addSide(info)
}
