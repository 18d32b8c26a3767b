package mapper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// fuseMapper exposes the image as a file with rbd-fuse, in a private
// directory per volume, and puts a loop device on that file. It needs no
// RBD or NBD kernel module, only FUSE and loop devices.
type fuseMapper struct {
	dir     string // per-volume directories live here (0700)
	keys    KeyDir
	run     command.Runner
	connect time.Duration
	sysRoot string
}

// FuseOptions configure the fuse mapper.
type FuseOptions struct {
	// Dir holds one private directory per mapped volume. It must be on
	// the node (not in a container layer that a restart throws away).
	Dir    string
	Keys   KeyDir
	Runner command.Runner
	// ConnectTimeout bounds rbd-fuse's connection to the cluster.
	ConnectTimeout time.Duration
	// SysRoot prefixes /sys, /proc and /dev paths (tests); empty means "/".
	SysRoot string
}

// NewFuse returns the rbd-fuse + loop mapper.
func NewFuse(o FuseOptions) Mapper {
	f := &fuseMapper{dir: o.Dir, keys: o.Keys, run: o.Runner, connect: o.ConnectTimeout, sysRoot: o.SysRoot}
	if f.run == nil {
		f.run = command.ExecRunner{}
	}
	if f.connect <= 0 {
		f.connect = 30 * time.Second
	}
	if f.sysRoot == "" {
		f.sysRoot = "/"
	}
	return f
}

// fusePaths are the files of one volume's private directory.
type fusePaths struct {
	dir, mnt, file, conf, spec, log string
}

func (f *fuseMapper) paths(img Image) fusePaths {
	spec := img.ClusterID + "/" + img.Pool + "/" + img.Name
	if img.Namespace != "" { // (paths of the default namespace stay as they were)
		spec = img.ClusterID + "/" + img.Pool + "/" + img.Namespace + "/" + img.Name
	}
	sum := sha256.Sum256([]byte(spec))
	dir := filepath.Join(f.dir, hex.EncodeToString(sum[:12]))
	mnt := filepath.Join(dir, "mnt")
	return fusePaths{
		dir: dir, mnt: mnt, file: filepath.Join(mnt, img.Name),
		conf: filepath.Join(dir, "ceph.conf"), spec: filepath.Join(dir, "image.json"),
		log: filepath.Join(dir, "rbd-fuse.log"),
	}
}

func (f *fuseMapper) Supported(context.Context) error {
	for _, dev := range []string{"dev/fuse", "dev/loop-control"} {
		if !exists(f.sysRoot, dev) {
			return unsupported(Fuse, fmt.Sprintf("/%s is missing", dev))
		}
	}
	for _, t := range []string{"rbd-fuse", "losetup"} {
		if _, err := exec.LookPath(t); err != nil {
			return unsupported(Fuse, fmt.Sprintf("the %s tool is not installed", t))
		}
	}
	return nil
}

// fuseProbeAfter is how long a first listing may take before the mapper
// asks `rbd info` why rbd-fuse does not answer; a healthy one answers in
// well under a second once mounted.
const fuseProbeAfter = 3 * time.Second

// fuseDefaultPool is the pool rbd-fuse serves when given none.
const fuseDefaultPool = "rbd"

// fuseArgs is rbd-fuse's argv: name=value forms, so that no value can be
// taken for an option, and the key only in the keyring file. The pool goes
// only where it is not rbd-fuse's default: with libfuse 3.17 and later,
// rbd-fuse (Ceph 18.2.7 and 20.2.4 in Debian 13 and 14) frees its default
// pool name, a string constant, when given another, and crashes.
func fuseArgs(p fusePaths, req MapRequest, keyringFile string) []string {
	args := []string{"--conf=" + p.conf, "--id=" + req.Cred.ID, "--keyring=" + keyringFile}
	if req.Image.Pool != fuseDefaultPool {
		args = append(args, "--poolname="+req.Image.Pool)
	}
	if req.Image.Namespace != "" {
		args = append(args, "--namespace="+req.Image.Namespace)
	}
	return append(args, "--image="+req.Image.Name,
		p.mnt, "-f", // foreground: we are its parent and see it exit
	)
}

// fuseConf is the whole Ceph configuration rbd-fuse gets: the node's
// /etc/ceph (if any) must not change what the driver does.
func fuseConf(monHost string, connect time.Duration) string {
	secs := max(1, int(connect.Seconds()))
	return fmt.Sprintf("[global]\nmon_host = %s\nclient_mount_timeout = %d\nadmin_socket =\nlog_file =\n", monHost, secs)
}

// Map starts rbd-fuse (unless a healthy one serves the image already) and
// puts a loop device on the image file (unless one is there already).
func (f *fuseMapper) Map(ctx context.Context, req MapRequest) (string, error) {
	p := f.paths(req.Image)
	if isFuseMount(f.sysRoot, p.mnt) {
		if st, err := statWithin(ctx, p.file, 5*time.Second); err != nil || !st.Mode().IsRegular() {
			// A dead or hung rbd-fuse: start over.
			if err := f.teardown(ctx, req.Image, false); err != nil {
				return "", err
			}
		}
	}
	if !isFuseMount(f.sysRoot, p.mnt) {
		if err := f.start(ctx, p, req); err != nil {
			if terr := f.teardown(context.WithoutCancel(ctx), req.Image, false); terr != nil {
				err = fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
			}
			return "", err
		}
	}
	if devs := loopsFor(f.sysRoot, p.file); len(devs) > 0 {
		return devs[0], nil
	}
	dev, err := losetupAttach(ctx, f.run, p.file, req.ReadOnly)
	if err != nil {
		err = fmt.Errorf("fuse map %s: %w", req.Image, err)
		if terr := f.teardown(context.WithoutCancel(ctx), req.Image, false); terr != nil {
			err = fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
		}
		return "", err
	}
	return dev, nil
}

// start runs rbd-fuse and returns once the image file is served. The
// keyring file exists only until then.
func (f *fuseMapper) start(ctx context.Context, p fusePaths, req MapRequest) error {
	for _, d := range []string{f.dir, p.dir, p.mnt} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	spec, _ := json.Marshal(req.Image)
	if err := writeFile(p.spec, spec); err != nil {
		return err
	}
	if err := writeFile(p.conf, []byte(fuseConf(req.MonHost, f.connect))); err != nil {
		return err
	}
	keyFile, removeKey, err := f.keys.write(keyring(req.Cred.ID, req.Cred.Key))
	if err != nil {
		return err
	}
	defer removeKey()
	// rbd-fuse reports connection errors on stderr before it mounts, then
	// points its stdio at /dev/null; a file (not a pipe nobody reads) is
	// the safe place for those first words.
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() { logf.Close(); os.Remove(p.log) }()

	cmd := exec.Command("rbd-fuse", fuseArgs(p, req, keyFile)...)
	cmd.Env = command.CleanEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the plugin's process group must not
	// take the mapping (and the filesystem on it) down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fuse map %s: starting rbd-fuse: %w", req.Image, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it whenever it ends

	// rbd-fuse does not say why it cannot serve an image (it spins when
	// its user may not read the pool): `rbd info` as the same user tells a
	// refused user and a missing image apart.
	auth := []string{"--conf=" + p.conf, "--id=" + req.Cred.ID, "--keyring=" + keyFile}
	fail := func(what string, err error) error {
		out, _ := os.ReadFile(p.log)
		msg := fmt.Errorf("fuse map %s: %s: %w: %s", req.Image, what, err, command.Tail(squeeze(string(out)), 600))
		if why := probe(ctx, f.run, req, auth...); why != nil {
			msg = fmt.Errorf("%w; %w", msg, why)
		} else if unreachable(string(out)) {
			msg = fmt.Errorf("%w: %w", ErrUnavailable, msg)
		}
		return redact(named(req, msg), req.Cred.Key)
	}
	ctx, cancel := context.WithTimeout(ctx, f.connect+5*time.Second)
	defer cancel()
	for !isFuseMount(f.sysRoot, p.mnt) {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exited")
			}
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
				// Debian 13's and 14's rbd-fuse (Ceph 18.2.7, 20.2.4)
				// crash this way in fuse_opt_parse, with libfuse 3.17+, when
				// given a pool other than rbd or a namespace (fuseArgs).
				return fmt.Errorf("%w: %w", ErrUnsupported, fail("rbd-fuse crashed before mounting (Ceph 18.2.7 and 20.2.4 built with libfuse 3.17 or later crash when given a pool other than rbd or a RADOS namespace: use krbd or nbd for this volume)", err))
			}
			return fail("rbd-fuse could not connect to the cluster", err)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return fail("rbd-fuse did not mount in time", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The first request waits for rbd-fuse to connect and open the pool;
	// the listing then says whether the image exists. One that does not
	// come at once is asked about (probe) rather than waited for to the
	// request's end.
	listing := readDirAsync(p.mnt)
	var names []string
	select {
	case r := <-listing:
		names, err = r.names, r.err
	case <-time.After(fuseProbeAfter):
		if why := probe(ctx, f.run, req, auth...); why != nil {
			// Ended, its mount fails what waits on it at once, and the
			// caller's teardown need not wait for the unmount first.
			_ = cmd.Process.Kill()
			return redact(named(req, fmt.Errorf("fuse map %s: rbd-fuse did not serve the image: %w", req.Image, why)), req.Cred.Key)
		}
		names, err = awaitListing(ctx, p.mnt, listing)
	case <-ctx.Done():
		names, err = awaitListing(ctx, p.mnt, listing)
	}
	if err != nil {
		return fail("rbd-fuse did not serve the image (is the cluster reachable, and may the Secret's user read the pool?)", err)
	}
	if !slices.Contains(names, req.Image.Name) {
		return fmt.Errorf("%w: %s does not exist", ErrNotFound, req.Image)
	}
	_ = os.Remove(p.conf) // read; no longer needed
	return nil
}

// Unmap detaches the loop device, unmounts the FUSE file system and waits
// for rbd-fuse to exit.
func (f *fuseMapper) Unmap(ctx context.Context, req UnmapRequest) error {
	return f.teardown(ctx, req.Image, req.Fenced)
}

// busyGrace is how long an unmap waits for a device that something else
// holds before it answers ErrBusy.
const busyGrace = 3 * time.Second

// detachWait is how long teardown waits for a loop device to detach: the
// request's time left but for detachReserve (the unmount and rbd-fuse's
// exit after it), and never less than 10 s.
func detachWait(ctx context.Context) time.Duration {
	const least = 10 * time.Second
	deadline, ok := ctx.Deadline()
	if !ok {
		return 2 * time.Minute
	}
	return max(least, time.Until(deadline)-detachReserve)
}

// fencedDetachWait is how long teardown lets a fenced mapping's loop
// device detach on its own before it ends rbd-fuse.
const fencedDetachWait = 5 * time.Second

// detachReserve is the part of a request's time teardown keeps for what
// follows the loop device's detach.
const detachReserve = 20 * time.Second

// teardown undoes whatever part of a mapping exists, in order. It never
// removes a directory recursively: the image file inside a live FUSE mount
// is the image itself (rbd-fuse maps unlink to `rbd rm`).
//
// fenced: the node's client of the image is blocklisted. Its rbd-fuse
// never answers the writes the loop device still has to pass on (they
// wait on a client Ceph no longer serves), so the device would not
// detach while it runs: after a short wait it is ended, which fails those
// writes, as Ceph already refuses them.
func (f *fuseMapper) teardown(ctx context.Context, img Image, fenced bool) error {
	p := f.paths(img)
	for _, dev := range loopsFor(f.sysRoot, p.file) {
		// Held for a moment after its unmount by a mount namespace made
		// meanwhile (a container or a chroot starting copies every mount
		// and drops the ones it does not need a moment later).
		if waitFor(ctx, busyGrace, func() bool { return !inUse(dev) }) != nil {
			return fmt.Errorf("%w: %s (image %s) is still mounted or open", ErrBusy, dev, img)
		}
		if _, err := f.run.Run(ctx, "losetup", "--detach", dev); err != nil && len(loopsFor(f.sysRoot, p.file)) > 0 {
			return fmt.Errorf("fuse unmap %s: %w", img, err)
		}
	}
	// The kernel detaches the device once its last writes reach the file.
	// An rbd-fuse whose client was fenced answers them late or never: a
	// fenced one is ended after a short wait, and for the rest the wait
	// lasts as long as the request allows, keeping time for what follows.
	detached := func() bool { return len(loopsFor(f.sysRoot, p.file)) == 0 }
	if fenced && waitFor(ctx, fencedDetachWait, detached) != nil {
		if err := f.killProcs(ctx, p.mnt); err != nil {
			return fmt.Errorf("fuse unmap %s: %w", img, err)
		}
	}
	if err := waitFor(ctx, detachWait(ctx), detached); err != nil {
		return fmt.Errorf("fuse unmap %s: loop device did not detach: %w", img, err)
	}
	// The loop device lets go of the file asynchronously, so the unmount
	// may see EBUSY for a moment.
	unmounted := func() bool {
		if !isFuseMount(f.sysRoot, p.mnt) {
			return true
		}
		err := syscall.Unmount(p.mnt, 0)
		return err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT)
	}
	if waitFor(ctx, 5*time.Second, unmounted) != nil {
		// An rbd-fuse that stopped answering (it spins when its user may
		// not read the pool) keeps its mount busy with the calls waiting
		// on it. Ending it fails those calls, and the unmount goes through.
		if err := f.killProcs(ctx, p.mnt); err != nil {
			return fmt.Errorf("fuse unmap %s: %w", img, err)
		}
		if err := waitFor(ctx, 10*time.Second, unmounted); err != nil {
			return fmt.Errorf("fuse unmap %s: unmounting %s: %w", img, p.mnt, err)
		}
	}
	if err := f.stopProcs(ctx, p.mnt); err != nil {
		return fmt.Errorf("fuse unmap %s: %w", img, err)
	}
	for _, file := range []string{p.conf, p.spec, p.log, p.mnt, p.dir} {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fuse unmap %s: %w", img, err)
		}
	}
	return nil
}

// stopProcs waits for the rbd-fuse serving mnt to exit after its unmount,
// and ends it if it does not.
func (f *fuseMapper) stopProcs(ctx context.Context, mnt string) error {
	if waitFor(ctx, 10*time.Second, f.procsGone(mnt)) == nil {
		return nil
	}
	return f.killProcs(ctx, mnt)
}

// procsGone is the condition "no rbd-fuse serves mnt".
func (f *fuseMapper) procsGone(mnt string) func() bool {
	return func() bool { return len(findProcs(f.sysRoot, "rbd-fuse", mnt)) == 0 }
}

// killProcs ends the rbd-fuse serving mnt: SIGTERM, then SIGKILL.
func (f *fuseMapper) killProcs(ctx context.Context, mnt string) error {
	gone := f.procsGone(mnt)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for _, pid := range findProcs(f.sysRoot, "rbd-fuse", mnt) {
			_ = syscall.Kill(pid, sig)
		}
		if waitFor(ctx, 5*time.Second, gone) == nil {
			return nil
		}
	}
	return fmt.Errorf("rbd-fuse for %s does not exit", mnt)
}

// List returns the volumes with a FUSE mount or a loop device.
func (f *fuseMapper) List(context.Context) ([]Mapped, error) {
	entries, err := os.ReadDir(f.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []Mapped
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name(), "image.json"))
		if err != nil {
			continue
		}
		var img Image
		if json.Unmarshal(b, &img) != nil {
			continue
		}
		p := f.paths(img)
		devs := loopsFor(f.sysRoot, p.file)
		if len(devs) == 0 && !isFuseMount(f.sysRoot, p.mnt) {
			continue
		}
		m := Mapped{Image: img}
		if len(devs) > 0 {
			m.Device = devs[0]
		}
		list = append(list, m)
	}
	return list, nil
}

// Refresh waits for the FUSE file to show the new image size (rbd-fuse
// notices a resize after a moment), then has the loop device re-read it.
func (f *fuseMapper) Refresh(ctx context.Context, device string, minBytes int64) (int64, error) {
	file := backingFile(f.sysRoot, device)
	if file == "" {
		return 0, fmt.Errorf("%s is not a loop device of this mapper", device)
	}
	for {
		st, err := statWithin(ctx, file, 10*time.Second)
		if err != nil {
			return 0, err
		}
		if st.Size() >= minBytes {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the image file still shows %d bytes, expected at least %d: %w", st.Size(), minBytes, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	if _, err := f.run.Run(ctx, "losetup", "--set-capacity", device); err != nil {
		return 0, err
	}
	return waitDeviceSize(ctx, device, minBytes, nil)
}

// squeeze drops the blank lines Ceph tools put between messages.
func squeeze(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o600)
}

// waitFor polls cond until it holds, ctx ends or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	return nil
}
