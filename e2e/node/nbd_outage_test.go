package node

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestNBDOutageSeenByAPod: what a pod sees while rbd-nbd is gone. Two
// writers append sequence-numbered records, each fsynced, to files on a
// mounted ext4 volume: one through the whole run, one that starts only
// once the daemon is dead. The node plugin and rbd-nbd are SIGKILLed (its
// container died); while no daemon serves the device, no record completes
// and none fails: the kernel holds the I/O. The restarted plugin, called
// with the secret (kubelet's republish), re-attaches a new daemon, and the
// held writes complete after that. Every record reads back from
// the device, the filesystem is still mounted read-write with no ext4
// error counted, and a write after the outage reaches Ceph.
func TestNBDOutageSeenByAPod(t *testing.T) {
	if mounter() != "nbd" {
		t.Skipf("only rbd-nbd is a daemon that can die under a mounted volume; the %s mounter's mapping lives on its own", mounter())
	}
	e := setup(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("node-nbd-outage", 64*mib, c)
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	dev := mountSource(staging)
	errorsBefore := ext4Errors(t, dev)

	steady := newRecordWriter(t, filepath.Join(target, "steady"))
	gap := newRecordWriter(t, filepath.Join(target, "gap")) // created now, written from the outage on
	steady.start()
	steady.waitDone(5)

	pid := nbdPid(t, dev)
	e.p.Kill()
	harness.Must(t, syscall.Kill(pid, syscall.SIGKILL), "killing rbd-nbd %d", pid)
	waitFor(t, "rbd-nbd to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	dead := time.Now()
	gap.start()
	// What was in flight when the daemon died is held, and so is all that
	// comes after: for a while, nothing completes, and nothing fails.
	steadyAtDeath := steady.doneCount()
	time.Sleep(harness.Slowdown() * 3 * time.Second)
	if n := steady.doneCount(); n != steadyAtDeath {
		t.Errorf("%d records completed while no rbd-nbd served %s", n-steadyAtDeath, dev)
	}
	if n := gap.doneCount(); n != 0 {
		t.Errorf("%d records of the gap writer completed while no rbd-nbd served %s", n, dev)
	}
	steady.expectWaiting()
	gap.expectWaiting()

	e.p.Start()
	republish := e.publishReq(v, staging, target, c, false)
	republish.Secrets = e.c.Secrets()
	healing := time.Now()
	_, err := e.nc.NodePublishVolume(ctx(t), republish)
	harness.Must(t, err, "republish with the secret (the re-attach)")
	t.Logf("rbd-nbd was gone for %v until the republish; the re-attach took %v", healing.Sub(dead), time.Since(healing))
	steady.waitDone(steadyAtDeath + 5)
	gap.waitDone(5)
	steady.stop()
	gap.stop()
	// The records that waited through the outage (the steady writer's
	// next, the gap writer's first) were issued before the re-attach and
	// completed after it began.
	for _, h := range []struct {
		w   *recordWriter
		seq int
	}{{steady, steadyAtDeath}, {gap, 0}} {
		issued, done := h.w.times(h.seq)
		if !issued.Before(healing) || !done.After(healing) {
			t.Errorf("%s: record %d, held through the outage, was issued at %v and done at %v; the re-attach began at %v",
				h.w.name, h.seq, issued.Format(time.StampMilli), done.Format(time.StampMilli), healing.Format(time.StampMilli))
		}
		t.Logf("%s: %d records; record %d waited %v for its write and fsync", h.w.name, h.w.doneCount(), h.seq, done.Sub(issued))
	}

	for _, path := range []string{staging, target} {
		if opts := procMountsOptions(t, path); !slices.Contains(opts, "rw") {
			t.Errorf("%s is mounted %v after the outage, not read-write", path, opts)
		}
	}
	if after := ext4Errors(t, dev); after != errorsBefore {
		t.Errorf("ext4 on %s counted %d errors during the outage (%d before)", dev, after-errorsBefore, errorsBefore)
	}
	after := writeRandom(t, filepath.Join(target, "after"), 2*mib)
	harness.Must(t, dropCaches(), "drop caches")
	steady.verify()
	gap.verify()
	if got := fileSum(t, filepath.Join(target, "after")); got != after {
		t.Errorf("data written after the outage: %s, wrote %s", got, after)
	}
}

// recordWriter appends fixed-size records, record i at offset i*recordSize,
// fsyncing each, and notes when each was issued and when its fsync
// returned.
type recordWriter struct {
	t    *testing.T
	name string
	f    *os.File

	mu      sync.Mutex
	issued  []time.Time
	done    []time.Time
	err     error
	started bool

	quit, exited chan struct{}
	once         sync.Once
}

const recordSize = 4096

func newRecordWriter(t *testing.T, path string) *recordWriter {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	harness.Must(t, err, "create %s", path)
	w := &recordWriter{t: t, name: filepath.Base(path), f: f, quit: make(chan struct{}), exited: make(chan struct{})}
	t.Cleanup(func() { w.stop(); f.Close() })
	return w
}

// record is what record seq of the writer holds: its number, then bytes
// that differ per writer and record.
func (w *recordWriter) record(seq int) []byte {
	out := fmt.Appendf(make([]byte, 0, recordSize+32), "%s record %08d\n", w.name, seq)
	block := sha256.Sum256(out)
	for len(out) < recordSize {
		block = sha256.Sum256(block[:])
		out = append(out, block[:]...)
	}
	return out[:recordSize]
}

func (w *recordWriter) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	go w.run()
}

func (w *recordWriter) run() {
	defer close(w.exited)
	for seq := 0; ; seq++ {
		select {
		case <-w.quit:
			return
		default:
		}
		w.mu.Lock()
		w.issued = append(w.issued, time.Now())
		w.mu.Unlock()
		_, err := w.f.WriteAt(w.record(seq), int64(seq)*recordSize)
		if err == nil {
			err = w.f.Sync()
		}
		w.mu.Lock()
		if err != nil {
			w.err = fmt.Errorf("record %d: %w", seq, err)
		} else {
			w.done = append(w.done, time.Now())
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
		// A pod's pace, not a flood: a few seconds of it must not fill the
		// volume.
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *recordWriter) doneCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

// waitDone waits until n records are done; a write error fails the test.
func (w *recordWriter) waitDone(n int) {
	w.t.Helper()
	deadline := time.Now().Add(harness.Slowdown() * 2 * time.Minute)
	for {
		w.mu.Lock()
		done, err := len(w.done), w.err
		w.mu.Unlock()
		switch {
		case err != nil:
			w.t.Fatalf("%s: the writer failed after %d records: %v", w.name, done, err)
		case done >= n:
			return
		case time.Now().After(deadline):
			w.t.Fatalf("%s: %d records done after two minutes, want %d", w.name, done, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// expectWaiting checks that the writer has a record issued and not done,
// and no error: its write waits.
func (w *recordWriter) expectWaiting() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		w.t.Errorf("%s: a write failed while rbd-nbd was gone: %v", w.name, w.err)
	} else if len(w.issued) != len(w.done)+1 {
		w.t.Errorf("%s: %d records issued, %d done: none is waiting", w.name, len(w.issued), len(w.done))
	}
}

// times are when record seq was issued and when its fsync returned (the
// writer has stopped, and wrote it).
func (w *recordWriter) times(seq int) (issued, done time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.issued[seq], w.done[seq]
}

// stop ends the writer after its current record.
func (w *recordWriter) stop() {
	w.once.Do(func() { close(w.quit) })
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		<-w.exited
	}
}

// verify reads the file back (the writer has stopped): exactly the
// records done, each as written.
func (w *recordWriter) verify() {
	w.t.Helper()
	b, err := os.ReadFile(w.f.Name())
	harness.Must(w.t, err, "read %s", w.f.Name())
	n := w.doneCount()
	if len(b) != n*recordSize {
		w.t.Errorf("%s holds %d bytes, want %d records of %d", w.name, len(b), n, recordSize)
	}
	for seq := 0; seq < n && (seq+1)*recordSize <= len(b); seq++ {
		if got := b[seq*recordSize : (seq+1)*recordSize]; string(got) != string(w.record(seq)) {
			w.t.Errorf("%s: record %d does not read back as written (starts %q)", w.name, seq, got[:32])
			return
		}
	}
}

// ext4Errors is the error count the kernel keeps for the ext4 on dev.
func ext4Errors(t *testing.T, dev string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(dev), "errors_count"))
	harness.Must(t, err, "the ext4 error count of %s", dev)
	var n int
	_, err = fmt.Sscan(string(b), &n)
	harness.Must(t, err, "parsing the ext4 error count %q", b)
	return n
}

// procMountsOptions are the options /proc/mounts shows for the last mount at
// path ("ro" there also when ext4 remounted itself read-only on an error).
func procMountsOptions(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	harness.Must(t, err, "read /proc/mounts")
	var opts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == path {
			opts = strings.Split(f[3], ",")
		}
	}
	if opts == nil {
		t.Fatalf("%s is not mounted", path)
	}
	return opts
}
