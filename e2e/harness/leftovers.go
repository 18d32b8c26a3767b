package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Leftovers is what the node still holds under a directory: mount points
// (FUSE ones too), loop devices on files there and rbd-fuse processes
// serving a directory there. Only paths under that directory are looked at,
// so other users of the machine do not matter. Kernel mappings (krbd, nbd)
// belong to no directory: all of them count, which holds where the kernel
// can map at all, in the kernel-test guest that nothing else uses.
type Leftovers struct {
	Mounts  []Mount // in mount order: a stacked mount comes after the one below
	Loops   []Loop
	RBDFuse []int    // live (not zombie) rbd-fuse processes
	Kernel  []string // krbd and nbd devices that are mapped
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Point, FSType, Source string
}

// FUSE tells the rbd-fuse mounts (and any other FUSE one) from the
// filesystems mounted on top of their images.
func (m Mount) FUSE() bool { return strings.HasPrefix(m.FSType, "fuse") }

func (m Mount) String() string { return fmt.Sprintf("%s (%s from %s)", m.Point, m.FSType, m.Source) }

// Loop is a loop device and its backing file.
type Loop struct {
	Dev, File string // Dev is the /dev path, for losetup -d
}

// FindLeftovers scans the node for what is left under dir. On an error
// it still returns what the other scans found.
func FindLeftovers(dir string) (Leftovers, error) {
	var l Leftovers
	var errs [4]error
	l.Mounts, errs[0] = MountsUnder(dir)
	l.Loops, errs[1] = LoopsUnder(dir)
	l.RBDFuse, errs[2] = RBDFuseProcs(dir)
	l.Kernel, errs[3] = KernelMappings()
	return l, errors.Join(errs[:]...)
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool { return len(l.Mounts)+len(l.Loops)+len(l.RBDFuse)+len(l.Kernel) == 0 }

// Describe lists the leftovers for a test failure or a log.
func (l Leftovers) Describe() []string {
	var out []string
	for _, m := range l.Mounts {
		out = append(out, "mount "+m.String())
	}
	for _, lo := range l.Loops {
		out = append(out, fmt.Sprintf("loop device %s on %s", lo.Dev, lo.File))
	}
	for _, pid := range l.RBDFuse {
		out = append(out, fmt.Sprintf("rbd-fuse process %d", pid))
	}
	return append(out, l.Kernel...)
}

// KernelMappings lists the images mapped through the kernel: krbd devices
// ("krbd /dev/rbd0 pool/image") and nbd devices that have a server process
// ("nbd /dev/nbd0 pid 123"; the kernel shows the pid file only while
// connected), and the driver's dm-crypt devices on them. A kernel without
// rbd or nbd has none.
func KernelMappings() ([]string, error) {
	var out []string
	ids, err := filepath.Glob("/sys/bus/rbd/devices/*")
	for _, d := range ids {
		pool, _ := os.ReadFile(filepath.Join(d, "pool"))
		name, _ := os.ReadFile(filepath.Join(d, "name"))
		out = append(out, fmt.Sprintf("krbd /dev/rbd%s %s/%s", filepath.Base(d),
			strings.TrimSpace(string(pool)), strings.TrimSpace(string(name))))
	}
	pids, gerr := filepath.Glob("/sys/block/nbd*/pid")
	for _, p := range pids {
		pid, rerr := os.ReadFile(p)
		if rerr == nil {
			out = append(out, fmt.Sprintf("nbd /dev/%s pid %s", filepath.Base(filepath.Dir(p)), strings.TrimSpace(string(pid))))
		}
	}
	// The driver's dm-crypt devices (encrypted volumes) sit on those.
	names, derr := filepath.Glob("/sys/block/dm-*/dm/name")
	for _, p := range names {
		name, rerr := os.ReadFile(p)
		if n := strings.TrimSpace(string(name)); rerr == nil && strings.HasPrefix(n, "rbdcsi-") {
			out = append(out, fmt.Sprintf("dm-crypt /dev/mapper/%s", n))
		}
	}
	return out, errors.Join(err, gerr, derr)
}

// MountsUnder lists the mounts at or below dir.
func MountsUnder(dir string) ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		// Optional fields come before the " - " separator, so the mount
		// point is the 5th field before it and type and source follow it.
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		m := Mount{Point: f[4], FSType: g[0]}
		if len(g) > 1 {
			m.Source = g[1]
		}
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m)
		}
	}
	return out, nil
}

// LoopsUnder lists the loop devices whose backing file is below dir.
func LoopsUnder(dir string) ([]Loop, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []Loop
	for _, f := range files {
		// A read error is a device detached since the glob.
		b, rerr := os.ReadFile(f)
		if file := strings.TrimSpace(string(b)); rerr == nil && strings.HasPrefix(file, dir+"/") {
			out = append(out, Loop{Dev: "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f))), File: file})
		}
	}
	return out, err
}

// RBDFuseProcs lists the live (not zombie) rbd-fuse processes with an
// argument below dir.
func RBDFuseProcs(dir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, perr := strconv.Atoi(e.Name())
		if perr != nil {
			continue
		}
		// Read errors are processes gone since the listing.
		cmd, rerr := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if rerr != nil || len(cmd) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(cmd, "\x00")), "\x00")
		if filepath.Base(argv[0]) != "rbd-fuse" || !strings.Contains(string(cmd), dir+"/") {
			continue
		}
		// The state is the field after the ")" that closes the name.
		st, rerr := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); rerr == nil && i > 0 && i+2 < len(st) && st[i+2] != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids, err
}
