package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

func (b *bench) stage(ctx context.Context, nc csi.NodeClient, v *csi.Volume, fs, staging string) error {
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	// Recorded first: a stage that fails half-way still needs its unstage.
	b.led.addStaged(stagedVol{volumeID: v.VolumeId, staging: staging, node: nc})
	ctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
	defer cancel()
	_, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.VolumeId, StagingTargetPath: staging, VolumeCapability: mountCap(fs),
		VolumeContext: v.VolumeContext, Secrets: b.c.secrets(),
	})
	if err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.VolumeId, err)
	}
	return nil
}

func (b *bench) unstage(ctx context.Context, nc csi.NodeClient, v *csi.Volume, staging string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
	defer cancel()
	if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", v.VolumeId, err)
	}
	b.led.dropStaged(staging)
	return os.Remove(staging)
}

// warmNode stages and unstages one small volume per filesystem, untimed:
// the first map of a fresh plugin (rbd-fuse, mkfs and mount binaries and
// libraries not yet in the page cache) is no measure of the rest.
func (b *bench) warmNode(ctx context.Context, p *plugin) error {
	cc, nc := p.controller(), p.node()
	for _, fs := range []string{"ext4", "xfs"} {
		name := fmt.Sprintf("bench-%s-node-warm-%s", b.runID, fs)
		v, err := b.createVolume(ctx, cc, name, gib, fs, nil)
		if err != nil {
			return err
		}
		staging := filepath.Join(b.work, "stage", name)
		if err := b.stage(ctx, nc, v, fs, staging); err != nil {
			return err
		}
		if err := b.unstage(ctx, nc, v, staging); err != nil {
			return err
		}
		if err := b.deleteVolume(ctx, cc, v.VolumeId); err != nil {
			return err
		}
	}
	return nil
}

// stageRun is one timed stage + unstage of a fresh volume.
type stageRun struct {
	FS       string  `json:"fs"`
	Size     int64   `json:"size"`
	Round    int     `json:"round"`
	StageS   float64 `json:"stage_s"`
	UnstageS float64 `json:"unstage_s"`
	DeleteS  float64 `json:"delete_s"` // DeleteVolume afterwards (not part of the ratio)
	// Steps of the stage, from the plugin's log.
	Steps *stageSteps `json:"steps,omitempty"`
	// Objects is how many RBD data objects the stage wrote (mkfs, mount,
	// unmount): what the filesystem's size costs in I/O.
	Objects int `json:"objects_written"`
	// Check of ext4's objects against those its metadata needs.
	Ext4 *objectsCheck `json:"ext4_objects,omitempty"`
}

// p3 stages and unstages fresh 1 GiB and 1 TiB volumes, per filesystem.
func (b *bench) p3(ctx context.Context, p *plugin) ([]stageRun, error) {
	cc, nc := p.controller(), p.node()
	var runs []stageRun
	sizes := []int64{gib, tib}
	for _, fs := range []string{"ext4", "xfs"} {
		for round := 0; round < b.cfg.stageRounds; round++ {
			for j := range sizes {
				size := sizes[(j+round)%len(sizes)]
				name := fmt.Sprintf("bench-%s-p3-%s-%d-r%d", b.runID, fs, size>>30, round)
				v, err := b.createVolume(ctx, cc, name, size, fs, nil)
				if err != nil {
					return runs, err
				}
				staging := filepath.Join(b.work, "stage", name)
				layout, err := b.imageLayout(ctx, imageOf(v.VolumeId))
				if err != nil {
					return runs, err
				}
				start := time.Now()
				if err := b.stage(ctx, nc, v, fs, staging); err != nil {
					return runs, err
				}
				staged := time.Now()
				// Untimed, between the two: what the made filesystem needs.
				var fsObjs ext4Objects
				if fs == "ext4" {
					if fsObjs, err = stagedExt4Needs(ctx, staging, layout.objectSize); err != nil {
						return runs, fmt.Errorf("P3 %s: %w", name, err)
					}
				}
				unstaging := time.Now()
				if err := b.unstage(ctx, nc, v, staging); err != nil {
					return runs, err
				}
				r := stageRun{FS: fs, Size: size, Round: round, StageS: staged.Sub(start).Seconds(), UnstageS: time.Since(unstaging).Seconds()}
				steps, ok := b.stageSteps(p, v.VolumeId, start, staged)
				if ok {
					r.Steps = &steps
				}
				held, err := b.dataObjects(ctx, layout)
				if err != nil {
					return runs, err
				}
				r.Objects = len(held)
				if fs == "ext4" {
					r.Ext4 = checkObjects(held, fsObjs, size, layout.objectSize)
					if err := b.sayContents(ctx, layout, r.Ext4); err != nil {
						return runs, err
					}
				}
				start = time.Now()
				if err := b.deleteVolumeWithin(ctx, cc, v.VolumeId, b.cfg.nodeTimeout); err != nil {
					return runs, err
				}
				r.DeleteS = time.Since(start).Seconds()
				how := ""
				if r.Steps != nil {
					how = fmt.Sprintf(" (map %.0f, mkfs+mount %.0f)", r.Steps.MapS*1000, r.Steps.FormatS*1000)
				}
				objs := fmt.Sprintf("%d objects written", r.Objects)
				if r.Ext4 != nil {
					objs += fmt.Sprintf(" (the filesystem needs %d; beyond them: %d)", r.Ext4.Needed, len(r.Ext4.Beyond))
				}
				b.logf("  P3 %-4s %-5s round %d: stage %6.0f ms%s, unstage %4.0f ms, %s; DeleteVolume %.1f s", fs, sizeName(size), round+1, r.StageS*1000, how, r.UnstageS*1000, objs, r.DeleteS)
				runs = append(runs, r)
			}
		}
	}
	return runs, nil
}

func sizeName(n int64) string {
	if n >= tib {
		return fmt.Sprintf("%dTiB", n/tib)
	}
	return fmt.Sprintf("%dGiB", n/gib)
}

// parallelRun is one batch of volumes staged, then unstaged, at one
// concurrency.
type parallelRun struct {
	Concurrency int     `json:"concurrency"`
	Round       int     `json:"round"`
	Volumes     int     `json:"volumes"`
	StageS      float64 `json:"stage_s"`
	UnstageS    float64 `json:"unstage_s"`
}

// p7 stages a batch of fresh volumes at concurrency 1 and at the parallel
// concurrency: fresh ones each time, so that every stage formats.
func (b *bench) p7(ctx context.Context, p *plugin) ([]parallelRun, error) {
	cc, nc := p.controller(), p.node()
	concs := []int{1, b.cfg.parallelConcurrency}
	var runs []parallelRun
	n := b.cfg.parallelVolumes
	for round := 0; round < b.cfg.parallelRounds; round++ {
		for j := range concs {
			c := concs[(j+round)%len(concs)]
			vols := make([]*csi.Volume, n)
			_, err := runOps(ctx, n, 4, func(ctx context.Context, i int) error {
				v, err := b.createVolume(ctx, cc, fmt.Sprintf("bench-%s-p7-c%d-r%d-%d", b.runID, c, round, i), gib, "ext4", nil)
				vols[i] = v
				return err
			})
			if err != nil {
				return runs, err
			}
			staging := func(i int) string { return filepath.Join(b.work, "stage", fmt.Sprintf("p7-c%d-r%d-%d", c, round, i)) }
			r := parallelRun{Concurrency: c, Round: round, Volumes: n}
			took, err := runOps(ctx, n, c, func(ctx context.Context, i int) error { return b.stage(ctx, nc, vols[i], "ext4", staging(i)) })
			if err != nil {
				return runs, err
			}
			r.StageS = took.Seconds()
			took, err = runOps(ctx, n, c, func(ctx context.Context, i int) error { return b.unstage(ctx, nc, vols[i], staging(i)) })
			if err != nil {
				return runs, err
			}
			r.UnstageS = took.Seconds()
			if _, err := runOps(ctx, n, 4, func(ctx context.Context, i int) error { return b.deleteVolume(ctx, cc, vols[i].VolumeId) }); err != nil {
				return runs, err
			}
			b.logf("  P7 %d volumes at c=%d round %d: stage %5.1fs, unstage %5.1fs", n, c, round+1, r.StageS, r.UnstageS)
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// forceCleanNode removes, by hand, what the plugin failed to: mounts under
// dir (deepest first), loop devices on files under dir, and the rbd-fuse
// processes serving directories under dir. It returns what it found.
func forceCleanNode(dir string) []string {
	l, err := harness.FindLeftovers(dir)
	found := l.Describe()
	if err != nil {
		found = append(found, "scanning the node: "+err.Error())
	}
	unmount := func(m string) {
		if exec.Command("umount", m).Run() != nil {
			_ = exec.Command("umount", "-l", m).Run()
		}
	}
	// Filesystems on loop devices first, then the loop devices, then the
	// FUSE mounts that back them, then the rbd-fuse processes.
	var mounts, fuseMounts []string
	for _, m := range l.Mounts {
		if m.FUSE() {
			fuseMounts = append(fuseMounts, m.Point)
		} else {
			mounts = append(mounts, m.Point)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		unmount(m)
	}
	for _, lo := range l.Loops {
		_ = exec.Command("losetup", "-d", lo.Dev).Run()
	}
	for _, m := range fuseMounts {
		unmount(m)
	}
	var wg sync.WaitGroup
	for _, pid := range l.RBDFuse {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 50; i++ {
				if syscall.Kill(pid, 0) != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}()
	}
	wg.Wait()
	return found
}

// stageSteps splits one stage, from the plugin's own log lines (klog
// timestamps): the map (rbd-fuse, loop device, blkid) until "formatting
// empty volume", the mkfs and mount until "staged volume", and the reply.
type stageSteps struct {
	MapS    float64 `json:"map_s"`
	FormatS float64 `json:"mkfs_mount_s"`
	ReplyS  float64 `json:"reply_s"`
}

func (b *bench) stageSteps(p *plugin, volumeID string, start, end time.Time) (stageSteps, bool) {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return stageSteps{}, false
	}
	var formatting, staged time.Time
	id := `volumeID="` + volumeID + `"`
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, id) {
			continue
		}
		switch {
		case strings.Contains(line, `"formatting empty volume"`):
			formatting = klogTime(line, start)
		case strings.Contains(line, `"staged volume"`):
			staged = klogTime(line, start)
		}
	}
	if formatting.IsZero() || staged.IsZero() {
		return stageSteps{}, false
	}
	return stageSteps{
		MapS: formatting.Sub(start).Seconds(), FormatS: staged.Sub(formatting).Seconds(), ReplyS: end.Sub(staged).Seconds(),
	}, true
}

// klogTime reads the time of a klog line ("I1122 01:29:35.123456 ..."),
// in local time, in the year of ref.
func klogTime(line string, ref time.Time) time.Time {
	f := strings.Fields(line)
	if len(f) < 2 || len(f[0]) != 5 {
		return time.Time{}
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", f[0][1:]+" "+f[1], time.Local)
	if err != nil {
		return time.Time{}
	}
	return t.AddDate(ref.Year(), 0, 0)
}
