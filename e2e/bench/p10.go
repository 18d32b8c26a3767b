package main

// P10, the data path: the same I/O through each way the node gives a pod
// a block device (krbd, rbd-nbd, LUKS2 on krbd), each staged and published
// by the driver as for a pod, against librbd's own (rbd bench) in the same
// guest and the same run. It runs inside the kernel VM only (make
// bench-data, scripts/bench-data.sh): this machine's kernel has neither
// krbd, nbd nor dm-crypt. The guest is emulated (TCG), its CPU work many
// times slower than the host's while the cluster runs natively on the
// host: the ratios show each path's overhead on this machine, not what it
// costs on hardware (docs/development.md, "Performance").

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// p10Side is one way to an image: librbd (rbd bench or fio's rbd engine)
// or a block device the driver published.
type p10Side struct {
	Name   string `json:"name"`
	Mapper string `json:"mapper,omitempty"` // krbd or nbd; "" for librbd
	Crypt  bool   `json:"encrypted,omitempty"`
	Fio    bool   `json:"fio"` // fio drives it; else rbd bench
	Image  string `json:"image"`
	Target string `json:"target,omitempty"` // the published block device
	Size   int64  `json:"size"`             // bytes the load may address
	// Queue is the kernel's request queue of the device under Target.
	Queue map[string]string `json:"queue,omitempty"`
	// Crypt is `cryptsetup status` of the encrypted volume's device.
	CryptStatus string `json:"crypt_status,omitempty"`
	vol         *csi.Volume
	staging     string
}

// The sides, in the order of the first round.
const (
	p10RBDBench = "rbd bench"
	p10FioRBD   = "fio librbd"
	p10KRBD     = "krbd"
	p10NBD      = "rbd-nbd"
	p10Crypt    = "LUKS2 on krbd"
)

// p10Sample is one run of one pattern on one side.
type p10Sample struct {
	Side    string `json:"side"`
	Pattern string `json:"pattern"`
	Round   int    `json:"round"`
	p10Result
	Figure float64 `json:"figure"` // IOPS or MB/s, as the pattern's rows
	// Share of the guest's vCPUs and of the host's CPUs busy meanwhile.
	GuestBusy float64   `json:"guest_cpu_busy"`
	HostBusy  float64   `json:"host_cpu_busy,omitempty"`
	Load      *loadSpan `json:"load"`
}

// inGuest sets the run up for P10, in the kernel VM: its results are
// named apart from make bench's, its configuration is P10's, the Ceph
// daemons' PIDs (the host's) are not watched, and the bench's own process
// is the one side that drives the load.
func (b *bench) inGuest() {
	cfg := b.cfg
	b.stamp = "data-" + b.stamp
	b.rep.Config = map[string]any{"scenarios": keys(cfg.scenarios), "data_size_bytes": cfg.dataSize, "data_seq_bytes": cfg.dataSeq,
		"data_rand_bytes": cfg.dataRand, "data_depth": cfg.dataDepth, "data_rounds": cfg.dataRounds, "image_features": cfg.imageFeatures}
	b.watch.pids = map[string][]int{"bench": {os.Getpid()}}
	b.sides.Sides[0].Name, b.sides.Sides[0].Runs = "bench", "drives P10's load: rbd bench and fio run as its children, under its environment"
}

// p10Kernel says what the guest lacks for P10, if anything.
func p10Kernel() error {
	var missing []string
	for _, p := range []string{"/sys/bus/rbd", "/sys/module/nbd", "/sys/module/dm_crypt"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := exec.LookPath("fio"); err != nil {
		missing = append(missing, "fio")
	}
	if len(missing) > 0 {
		return fmt.Errorf("P10 needs krbd, nbd, dm-crypt and fio, and runs in the kernel VM (make bench-data); missing here: %s", strings.Join(missing, ", "))
	}
	return nil
}

func (b *bench) runP10(ctx context.Context) error {
	if err := p10Kernel(); err != nil {
		return err
	}
	cfg := b.cfg
	b.logf("P10: %d MiB volumes, %d in flight, %d MiB per 1M sequential run, %d MiB per 4K random run, %d rounds",
		cfg.dataSize/mib, cfg.dataDepth, cfg.dataSeq/mib, cfg.dataRand/mib, cfg.dataRounds)
	p, kek, err := b.p10Plugin()
	if err != nil {
		return err
	}
	conf, err := b.p10Conf()
	if err != nil {
		return err
	}
	sides, err := b.p10Sides(ctx, p, kek)
	details := map[string]any{"sides": sides, "conf": "the cluster's ceph.conf with rbd_cache = false", "tools": p10Versions(ctx)}
	b.rep.Details["p10"] = details
	if err != nil {
		return err
	}
	if err := b.p10Fill(ctx, conf, sides); err != nil {
		return err
	}
	samples, err := b.p10Rounds(ctx, conf, sides)
	details["samples"] = samples
	if err != nil {
		return err
	}
	b.p10Rows(samples)
	return b.p10Release(ctx, p, sides)
}

// p10Plugin starts the plugin as a node runs it, serving the controller
// too, with its own Ceph user (a Secret's files) and a KMS of type secret,
// and draws the KEK the calls of the encrypted volume carry.
func (b *bench) p10Plugin() (*plugin, map[string]string, error) {
	secrets, err := b.secretDir()
	if err != nil {
		return nil, nil, err
	}
	kms := filepath.Join(b.work, "kms.json")
	if err := os.WriteFile(kms, []byte(`{"bench": {"type": "secret"}}`), 0o644); err != nil {
		return nil, nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, err
	}
	p, err := b.startPlugin("data", "--mode", "all", "--nodeid", "bench-guest", "--default-mounter", "krbd",
		"--state-dir", filepath.Join(b.work, "state"), "--v", "2",
		"--key-dir", filepath.Join(b.work, "keys"), "--allow-key-dir-on-disk",
		"--controller-secret-dir", secrets, "--node-secret-dir", secrets, "--kms-config", kms,
		// Under emulation a map takes several times as long.
		"--map-timeout", "5m")
	if err != nil {
		return nil, nil, err
	}
	return p, map[string]string{"encryptionKEK.k1": base64.StdEncoding.EncodeToString(key)}, nil
}

// p10Conf is the configuration the librbd sides run with: the cluster's,
// with librbd's cache off. With it on, rbd bench's first flush lets
// writes return before they reach the cluster, while O_DIRECT writes
// through a device wait for the OSDs.
func (b *bench) p10Conf() (string, error) {
	conf, err := os.ReadFile(b.c.Conf)
	if err != nil {
		return "", err
	}
	// Named ceph.conf: the file's name is the cluster's, and the keyrings
	// it names are found by it.
	dir := filepath.Join(b.work, "p10")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "ceph.conf")
	return path, os.WriteFile(path, append(conf, "\n[client]\nrbd_cache = false\n"...), 0o644)
}

var blockCap = &csi.VolumeCapability{
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
}

// p10Sides makes a block volume per side: the librbd sides share one,
// never staged; each device side's is staged and published by the plugin.
func (b *bench) p10Sides(ctx context.Context, p *plugin, kek map[string]string) ([]*p10Side, error) {
	sides := []*p10Side{{Name: p10RBDBench}, {Name: p10FioRBD, Fio: true},
		{Name: p10KRBD, Mapper: "krbd", Fio: true}, {Name: p10NBD, Mapper: "nbd", Fio: true},
		{Name: p10Crypt, Mapper: "krbd", Crypt: true, Fio: true}}
	var librbd *csi.Volume
	for i, s := range sides {
		if s.Mapper == "" && librbd != nil {
			s.vol, s.Image, s.Size = librbd, imageOf(librbd.VolumeId), b.cfg.dataSize
			continue
		}
		params := b.c.params()
		var secrets map[string]string
		if s.Mapper != "" {
			params["mounter"] = s.Mapper
		}
		if s.Crypt {
			params["encrypted"], params["encryptionKMSID"] = "true", "bench"
			secrets = kek
		}
		name := fmt.Sprintf("bench-%s-p10-%d", b.runID, i)
		v, err := b.p10Create(ctx, p, name, params, secrets)
		if err != nil {
			return sides, err
		}
		s.vol, s.Image, s.Size = v, imageOf(v.VolumeId), b.cfg.dataSize
		if s.Mapper == "" {
			librbd = v
			continue
		}
		s.staging, s.Target = filepath.Join(b.work, "stage", name), filepath.Join(b.work, "publish", name)
		if err := b.p10Publish(ctx, p, s, secrets); err != nil {
			return sides, err
		}
		if s.Size, err = deviceSize(s.Target); err != nil {
			return sides, err
		}
		s.Queue = queueOf(s.Target)
		if s.Crypt {
			// runs: cryptsetup
			st, err := exec.CommandContext(ctx, "cryptsetup", "status", s.Queue["dm"]).Output()
			if err != nil {
				return sides, fmt.Errorf("cryptsetup status %s: %w", s.Queue["dm"], err)
			}
			s.CryptStatus = strings.TrimSpace(string(st))
		}
		b.logf("  P10 %s: %s staged and published at %s (%s, queue %v)", s.Name, s.Image, s.Target, byteSize(s.Size), s.Queue)
	}
	return sides, nil
}

func (b *bench) p10Create(ctx context.Context, p *plugin, name string, params, secrets map[string]string) (*csi.Volume, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
	defer cancel()
	resp, err := p.controller().CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: b.cfg.dataSize},
		VolumeCapabilities: []*csi.VolumeCapability{blockCap}, Parameters: params, Secrets: secrets,
	})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	b.led.addVolume(resp.Volume.VolumeId, p.controller())
	return resp.Volume, nil
}

// p10Publish stages a side's volume and publishes it as a pod's block
// device, as kubelet would.
func (b *bench) p10Publish(ctx context.Context, p *plugin, s *p10Side, secrets map[string]string) error {
	nc := p.node()
	for _, d := range []string{s.staging, filepath.Dir(s.Target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
	defer cancel()
	// Recorded first: a call that fails half-way still needs its undoing.
	b.led.addStaged(stagedVol{volumeID: s.vol.VolumeId, staging: s.staging, node: nc})
	if _, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: s.vol.VolumeId, StagingTargetPath: s.staging, VolumeCapability: blockCap,
		VolumeContext: s.vol.VolumeContext, Secrets: secrets,
	}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", s.vol.VolumeId, err)
	}
	b.led.addPublished(s.vol.VolumeId, s.Target, nc)
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: s.vol.VolumeId, StagingTargetPath: s.staging, TargetPath: s.Target, VolumeCapability: blockCap,
		VolumeContext: s.vol.VolumeContext,
	}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", s.vol.VolumeId, err)
	}
	return nil
}

// p10Release unpublishes, unstages and deletes every side's volume.
func (b *bench) p10Release(ctx context.Context, p *plugin, sides []*p10Side) error {
	nc, cc := p.node(), p.controller()
	var errs []error
	for _, s := range sides {
		if s.Target == "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
		_, err := nc.NodeUnpublishVolume(cctx, &csi.NodeUnpublishVolumeRequest{VolumeId: s.vol.VolumeId, TargetPath: s.Target})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("NodeUnpublishVolume %s: %w", s.vol.VolumeId, err))
			continue
		}
		b.led.dropPublished(s.Target)
		if err := b.unstage(ctx, nc, s.vol, s.staging); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range sides {
		if s.Name == p10FioRBD {
			continue // the volume of rbd bench
		}
		if err := b.deleteVolume(ctx, cc, s.vol.VolumeId); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// p10Fill writes every side's whole image once, untimed: the rounds then
// overwrite objects that exist, on every side alike, and reads find data.
func (b *bench) p10Fill(ctx context.Context, conf string, sides []*p10Side) error {
	seq := p10Patterns[0]
	for _, s := range sides {
		var err error
		var out string
		switch {
		case s.Name == p10FioRBD:
			continue // rbd bench's image
		case s.Fio:
			_, out, err = fioOn(ctx, s.Target, s.Size, seq, b.cfg.dataDepth, s.Size)
		default:
			_, out, err = rbdBench(ctx, conf, b.c.CSIUser, b.c.Pool, s.Image, seq, b.cfg.dataDepth, s.Size)
		}
		if err != nil {
			return fmt.Errorf("P10 filling %s: %w (%s)", s.Name, err, tail(out, 300))
		}
	}
	b.logf("  P10 every image written once")
	return nil
}

// p10Rounds runs every pattern on every side, round after round; within a
// round the sides run one pattern back to back, starting with another
// side each round, so that a drift of the machine's load falls on all.
func (b *bench) p10Rounds(ctx context.Context, conf string, sides []*p10Side) ([]p10Sample, error) {
	var samples []p10Sample
	depth := b.cfg.dataDepth
	for round := 1; round <= b.cfg.dataRounds; round++ {
		for _, pat := range p10Patterns {
			total := b.cfg.dataSeq
			if pat.Rand {
				total = b.cfg.dataRand
			}
			for i := range sides {
				s := sides[(i+round-1)%len(sides)]
				load, busy0, host0 := newLoadSpan(), cpuNow(), hostCPU()
				var r p10Result
				var out string
				var err error
				switch {
				case s.Name == p10FioRBD:
					r, out, err = fioRBD(ctx, conf, b.c.CSIUser, b.c.Pool, s.Image, pat, depth, total)
				case s.Fio:
					r, out, err = fioOn(ctx, s.Target, s.Size, pat, depth, total)
				default:
					r, out, err = rbdBench(ctx, conf, b.c.CSIUser, b.c.Pool, s.Image, pat, depth, total)
				}
				load.sample()
				if err != nil {
					return samples, fmt.Errorf("P10 %s on %s: %w (%s)", pat.Name, s.Name, err, tail(out, 300))
				}
				smp := p10Sample{Side: s.Name, Pattern: pat.Name, Round: round, p10Result: r, Figure: pat.figure(r.IOPS),
					GuestBusy: busy0.busyTo(cpuNow()), Load: load}
				if host1 := hostCPU(); host0 != nil && host1 != nil {
					smp.HostBusy = host0.busyTo(*host1)
				}
				samples = append(samples, smp)
				b.logf("  P10 round %d %-19s %-13s %8.1f %s in %5.1f s (guest CPU %3.0f%%, host %3.0f%%, load %s)",
					round, pat.Name, s.Name, smp.Figure, pat.unit(), r.Seconds, 100*smp.GuestBusy, 100*smp.HostBusy, load)
			}
		}
	}
	return samples, nil
}

// p10Rows adds a row per pattern and side: its figure against rbd
// bench's (the median of the rounds' ratios); fio's through librbd
// against rbd bench's, how the tools differ; each device side's against
// fio's through librbd, the same tool on both; the encrypted volume's
// against plain krbd's, what dm-crypt adds.
func (b *bench) p10Rows(samples []p10Sample) {
	add := func(key string, pat p10Pattern, side, ref, refName string) {
		by := map[int]map[string]float64{}
		var vals, refs, ratios []float64
		load := &loadSpan{}
		for _, s := range samples {
			if s.Pattern != pat.Name || (s.Side != side && s.Side != ref) {
				continue
			}
			if by[s.Round] == nil {
				by[s.Round] = map[string]float64{}
			}
			by[s.Round][s.Side] = s.Figure
			load.merge(s.Load)
			if s.Side == side {
				vals = append(vals, s.Figure)
			} else {
				refs = append(refs, s.Figure)
			}
		}
		for _, m := range by {
			if m[ref] > 0 {
				ratios = append(ratios, m[side]/m[ref])
			}
		}
		total := b.cfg.dataSeq
		if pat.Rand {
			total = b.cfg.dataRand
		}
		rw := vs(fmt.Sprintf("%s, %s vs %s (%d in flight, %s a run; median of %d)", pat.Name, side, refName, b.cfg.dataDepth, byteSize(total), len(ratios)),
			pat.unit(), median(vals), median(refs), refName)
		rw.Ratio = ptr(median(ratios))
		b.rep.add(key, rw).Load = load.String()
	}
	for _, c := range []struct{ key, side, ref, refName string }{
		{keyP10KRBD, p10KRBD, p10RBDBench, "rbd bench"},
		{keyP10NBD, p10NBD, p10RBDBench, "rbd bench"},
		{keyP10Crypt, p10Crypt, p10RBDBench, "rbd bench"},
		{keyP10FioRBD, p10FioRBD, p10RBDBench, "rbd bench"},
		{keyP10KRBDFio, p10KRBD, p10FioRBD, "fio librbd"},
		{keyP10NBDFio, p10NBD, p10FioRBD, "fio librbd"},
		{keyP10CryptFio, p10Crypt, p10FioRBD, "fio librbd"},
		{keyP10CryptKRBD, p10Crypt, p10KRBD, "krbd"},
	} {
		for _, pat := range p10Patterns {
			add(c.key, pat, c.side, c.ref, c.refName)
		}
	}
}

// deviceSize is the size of the block device at path.
func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}

// p10Versions are the guest's tools, for the results.
func p10Versions(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, c := range [][]string{{"rbd", "--version"}, {"fio", "--version"}, {"cryptsetup", "--version"}, {"uname", "-r"}} {
		// runs: rbd fio cryptsetup uname
		if b, err := exec.CommandContext(ctx, c[0], c[1:]...).Output(); err == nil {
			out[c[0]] = strings.TrimSpace(string(b))
		}
	}
	return out
}
