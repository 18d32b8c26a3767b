package mapper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// loopsFor returns the loop devices backed by file, read from sysfs (no
// command to run, so nothing to time out).
func loopsFor(sysRoot, file string) []string {
	dirs, _ := filepath.Glob(filepath.Join(sysRoot, "sys/block/loop*/loop/backing_file"))
	var devs []string
	for _, bf := range dirs {
		b, err := os.ReadFile(bf)
		if err != nil {
			continue
		}
		// A backing file removed meanwhile reads "<path> (deleted)".
		back := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if back == file {
			name := filepath.Base(filepath.Dir(filepath.Dir(bf)))
			devs = append(devs, "/dev/"+name)
		}
	}
	return devs
}

// backingFile is the file behind a loop device, "" if it has none.
func backingFile(sysRoot, device string) string {
	b, err := os.ReadFile(filepath.Join(sysRoot, "sys/block", filepath.Base(device), "loop/backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
}

func losetupAttachArgs(file string, readOnly bool) []string {
	args := []string{"--find", "--show"}
	if readOnly {
		args = append(args, "--read-only")
	}
	return append(args, file)
}

// losetupAttach puts a loop device on file; losetup itself copes with
// concurrent callers racing for the same free device.
func losetupAttach(ctx context.Context, run command.Runner, file string, readOnly bool) (string, error) {
	out, err := run.Run(ctx, "losetup", losetupAttachArgs(file, readOnly)...)
	if err != nil {
		return "", err
	}
	dev := strings.TrimSpace(string(out))
	if !strings.HasPrefix(dev, "/dev/loop") {
		return "", fmt.Errorf("losetup printed %.100q, not a loop device", dev)
	}
	return dev, nil
}

// inUse reports whether something holds the device exclusively: a mounted
// filesystem does, so this refuses to detach a device under a mount.
func inUse(device string) bool {
	fd, err := unix.Open(device, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Is(err, unix.EBUSY)
	}
	unix.Close(fd)
	return false
}
