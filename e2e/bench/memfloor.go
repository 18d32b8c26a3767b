package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// floorProc is the floor program (e2e/bench/floor) running beside the
// plugins: a bare go-ceph client whose memory P5 puts beside the plugin's.
type floorProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr strings.Builder
	prefix string
}

// startFloor runs the floor program and waits for its warm-up (one image
// created and removed, as the bench warms a plugin up).
func (b *bench) startFloor(ctx context.Context) (*floorProc, error) {
	f := &floorProc{prefix: fmt.Sprintf("csi-raw-floor-%s", b.runID)}
	// runs: bin/rbdfloor
	f.cmd = exec.CommandContext(ctx, b.cfg.floor, "-image", f.prefix,
		"-burst-n", fmt.Sprint(b.cfg.n), "-burst-c", fmt.Sprint(slices.Max(b.cfg.concurrency)))
	// The plugin limits malloc arenas the same way (cmd/rbdplugin/malloc.go).
	f.cmd.Env = append(os.Environ(), "MALLOC_ARENA_MAX=8")
	f.cmd.Stderr = &f.stderr
	var err error
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	f.out = bufio.NewReader(stdout)
	warm := f.prefix + "-0" // the warm-up is a burst of one
	b.led.addRaw(warm)
	if err := f.cmd.Start(); err != nil {
		return nil, err
	}
	if err := f.expect("ready"); err != nil {
		return nil, err
	}
	b.led.dropRaw(warm)
	return f, nil
}

// expect reads the floor's next line; anything but word stops it. Its
// standard error is read only after it stopped: exec copies it until then.
func (f *floorProc) expect(word string) error {
	line, err := f.out.ReadString('\n')
	if err == nil && strings.TrimSpace(line) == word {
		return nil
	}
	f.stop()
	if err != nil {
		return fmt.Errorf("floor program: %w: %s", err, strings.TrimSpace(f.stderr.String()))
	}
	return fmt.Errorf("floor program said %q, not %q", line, word)
}

// floorBurst runs P1's Ceph work at the top concurrency in the floor
// program (N creates, then N reads and removals) and returns its memory,
// VmHWM the peak, recorded under p5_floor_peak.
func (b *bench) floorBurst(ctx context.Context, f *floorProc) (memStat, error) {
	if err := resetPeak(f.cmd.Process.Pid); err != nil {
		return memStat{}, err
	}
	names := make([]string, b.cfg.n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", f.prefix, i)
		b.led.addRaw(names[i])
	}
	if _, err := io.WriteString(f.stdin, "burst\n"); err != nil {
		return memStat{}, err
	}
	if err := f.expect("done"); err != nil {
		return memStat{}, err
	}
	for _, n := range names {
		b.led.dropRaw(n)
	}
	return b.memDetails(ctx, f.cmd.Process.Pid, "", "p5_floor_peak")
}

// stop ends the floor program; safe to call twice.
func (f *floorProc) stop() {
	if f == nil || f.stdin == nil {
		return
	}
	f.stdin.Close()
	f.stdin = nil
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// idleRow adds P5's idle rows: the plugin's RSS after its first Ceph
// connection against its budget with the floor's beside it, and against
// the gRPC floor's, each read after the same warm-up and the same wait.
func (b *bench) idleRow(ctx context.Context, idle memStat, f *floorProc) error {
	load := newLoadSpan()
	floor, err := b.memDetails(ctx, f.cmd.Process.Pid, "", "p5_floor_idle")
	if err != nil {
		return fmt.Errorf("P5 floor: %w", err)
	}
	b.logf("P5 floor, a bare go-ceph client: VmRSS %.1f MiB (%s)", floor.rssMiB(), memParts(floor))
	b.rep.budget("P5", fmt.Sprintf("plugin RSS idle, after the first Ceph connection (%s)", memPartsVs(idle, floor, true)),
		"MiB", idle.rssMiB(), targetIdleMiB, fmt.Sprintf("<= %.0f MiB", targetIdleMiB))
	b.withRef(floor.rssMiB(), "bare go-ceph client", load)
	if b.gfloor == nil {
		return nil
	}
	gf, err := b.memSnapshot(ctx, b.gfloor, "p5_grpc_floor_idle")
	if err != nil {
		return fmt.Errorf("P5 gRPC floor: %w", err)
	}
	b.logf("P5 gRPC floor, a minimal CSI controller on go-ceph: VmRSS %.1f MiB (%s)", gf.rssMiB(), memParts(gf))
	b.rep.compare("P5", fmt.Sprintf("plugin RSS idle vs the gRPC floor's (%s)", memPartsVs(idle, gf, true)),
		"MiB", idle.rssMiB(), gf.rssMiB(), "gRPC floor", 0, targetVsGRPCFloorMem)
	b.rep.Rows[len(b.rep.Rows)-1].Load = load.String()
	return nil
}

// memParts is a process's RSS by kind, for the log.
func memParts(m memStat) string {
	return fmt.Sprintf("anonymous %.1f, mapped files %.1f, of which %.1f in 2 MiB pages", kib(m.AnonKiB), kib(m.FileKiB), kib(m.FilePmdKiB))
}

// memPartsVs puts the plugin's RSS by kind beside a reference's, for a
// row; pmd adds the mapped files in 2 MiB pages.
func memPartsVs(p, ref memStat, pmd bool) string {
	s := fmt.Sprintf("anonymous %.1f MiB vs %.1f, mapped files %.1f vs %.1f", kib(p.AnonKiB), kib(ref.AnonKiB), kib(p.FileKiB), kib(ref.FileKiB))
	if pmd {
		s += fmt.Sprintf(", of which in 2 MiB pages %.1f vs %.1f", kib(p.FilePmdKiB), kib(ref.FilePmdKiB))
	}
	return s
}

// withRef puts a reference and the ratio to it beside the last row, a
// budget row, and the load since load began (nil: the scenario's).
func (b *bench) withRef(ref float64, name string, load *loadSpan) {
	rw := &b.rep.Rows[len(b.rep.Rows)-1]
	rw.Ref, rw.RefName, rw.Ratio = ptr(ref), name, ptr(rw.Value/ref)
	if load != nil {
		load.sample()
		rw.Load = load.String()
	}
}
