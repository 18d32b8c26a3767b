package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// floorProc is the floor program (e2e/bench/floor) running beside the
// plugins: a bare go-ceph client whose memory P5 puts beside the plugin's.
type floorProc struct {
	*proc
	stdin  io.WriteCloser
	out    *bufio.Reader
	prefix string
}

// startFloor runs the floor program through the sides' launcher and waits
// for its "ready": started, no Ceph connection yet, as a plugin whose
// socket opened.
func (b *bench) startFloor() (*floorProc, error) {
	f := &floorProc{prefix: fmt.Sprintf("csi-raw-floor-%s", b.runID)}
	args := []string{"-image", f.prefix, "-burst-n", fmt.Sprint(b.cfg.n), "-burst-c", fmt.Sprint(slices.Max(b.cfg.concurrency))}
	pr, err := startProc(b.work, "floor", b.cfg.floor, b.env, args, func(cmd *exec.Cmd) error {
		var err error
		if f.stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		f.out = bufio.NewReader(stdout)
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.proc = pr
	if err := f.expect("ready"); err != nil {
		return nil, err
	}
	return f, nil
}

// expect reads the floor's next line; anything but word stops it.
func (f *floorProc) expect(word string) error {
	line, err := f.out.ReadString('\n')
	if err == nil && strings.TrimSpace(line) == word {
		return nil
	}
	f.stop()
	if err != nil {
		return fmt.Errorf("floor program: %w: %s", err, f.tail(20))
	}
	return fmt.Errorf("floor program said %q, not %q", line, word)
}

// command sends the floor one command and waits for its "done"; the
// images it makes are <prefix>-0 to <prefix>-(n-1), in the ledger until
// then.
func (b *bench) floorCommand(f *floorProc, cmd string, n int) error {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", f.prefix, i)
		b.led.addRaw(names[i])
	}
	if _, err := io.WriteString(f.stdin, cmd+"\n"); err != nil {
		return err
	}
	if err := f.expect("done"); err != nil {
		return err
	}
	for _, n := range names {
		b.led.dropRaw(n)
	}
	return nil
}

// warmFloor makes the floor's first Ceph connection: one volume's image
// created, read and removed, as every side's warm-up.
func (b *bench) warmFloor(f *floorProc) error {
	return b.floorCommand(f, "warm", 1)
}

// floorBurst runs P1's Ceph work at the top concurrency in the floor
// program (N creates, then N reads and removals) and returns its memory,
// VmHWM the peak, recorded under p5_floor_peak.
func (b *bench) floorBurst(ctx context.Context, f *floorProc) (memStat, error) {
	if err := resetPeak(f.pid()); err != nil {
		return memStat{}, err
	}
	if err := b.floorCommand(f, "burst", b.cfg.n); err != nil {
		return memStat{}, err
	}
	return b.memDetails(ctx, f.pid(), "", "p5_floor_peak")
}

// stop ends the floor program (it exits when its standard input closes);
// safe to call twice and on nil.
func (f *floorProc) stop() {
	if f == nil || f.proc == nil {
		return
	}
	if f.stdin != nil {
		f.stdin.Close()
		f.stdin = nil
	}
	select {
	case <-f.done:
	case <-time.After(time.Minute):
	}
	f.proc.stop()
}

// idleRow adds P5's idle rows: the plugin's RSS after its first Ceph
// connection against its budget with the floor's beside it, and against
// the gRPC floor's, each read after the same warm-up and the same wait.
func (b *bench) idleRow(ctx context.Context, idle memStat, f *floorProc) error {
	load := newLoadSpan()
	floor, err := b.memDetails(ctx, f.pid(), "", "p5_floor_idle")
	if err != nil {
		return fmt.Errorf("P5 floor: %w", err)
	}
	b.logf("P5 floor, a bare go-ceph client: VmRSS %.1f MiB (%s)", floor.rssMiB(), memParts(floor))
	b.rep.add(keyP5Idle, vs(fmt.Sprintf("plugin RSS idle, after the first Ceph connection (%s)", memPartsVs(idle, floor, true)),
		"MiB", idle.rssMiB(), floor.rssMiB(), "bare go-ceph client"))
	load.sample()
	b.rep.Rows[len(b.rep.Rows)-1].Load = load.String()
	if b.gfloor == nil {
		return nil
	}
	gf, err := b.memSnapshot(ctx, b.gfloor, "p5_grpc_floor_idle")
	if err != nil {
		return fmt.Errorf("P5 gRPC floor: %w", err)
	}
	b.logf("P5 gRPC floor, a minimal CSI controller on go-ceph: VmRSS %.1f MiB (%s)", gf.rssMiB(), memParts(gf))
	b.rep.add(keyP5IdleGFloor, vs(fmt.Sprintf("plugin RSS idle vs the gRPC floor's (%s)", memPartsVs(idle, gf, true)),
		"MiB", idle.rssMiB(), gf.rssMiB(), "gRPC floor")).Load = load.String()
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
