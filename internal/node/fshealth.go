package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fsCondition is what the kernel says of a staged filesystem: read-only
// although staged for writing (ext4 with errors=remount-ro shuts writes
// off this way after I/O or metadata errors), and the errors ext4 recorded in its superblock
// (they stay until fsck clears them).
type fsCondition struct {
	readOnly bool
	errors   int
	first    string // ext4's first recorded error: function and error code
}

// ext4Sys is where the kernel shows each mounted ext4 filesystem's error
// counters, by the name of its block device.
const ext4Sys = "/sys/fs/ext4"

// stagedFSCondition reads the condition of the filesystem mounted at
// staging from device. Only facts: a path or counter it cannot read
// reports nothing.
func stagedFSCondition(staging, device string) (fsCondition, error) {
	var c fsCondition
	var st unix.Statfs_t
	if err := unix.Statfs(staging, &st); err != nil {
		return c, fmt.Errorf("statfs %s: %w", staging, err)
	}
	// Since Linux 6.8 ext4 no longer marks its superblock read-only on
	// an error; it says emergency_ro among its options instead.
	c.readOnly = st.Flags&unix.ST_RDONLY != 0 || slices.Contains(superOptions(staging), "emergency_ro")
	dev, err := filepath.EvalSymlinks(device) // /dev/mapper/x is dm-N to the kernel
	if err != nil {
		return c, nil
	}
	dir := filepath.Join(ext4Sys, filepath.Base(dev))
	raw, err := os.ReadFile(filepath.Join(dir, "errors_count"))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil // not ext4
	}
	if err != nil {
		return c, fmt.Errorf("reading the ext4 error count of %s: %w", dev, err)
	}
	c.errors, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
	if c.errors > 0 {
		fn, _ := os.ReadFile(filepath.Join(dir, "first_error_func"))
		code, _ := os.ReadFile(filepath.Join(dir, "first_error_errcode"))
		c.first = strings.TrimSpace(string(fn)) + " " + strings.TrimSpace(string(code))
	}
	return c, nil
}

// writable reports whether the volume was staged for writing.
func (c capSpec) writable() bool {
	return !c.readerOnly() && !slices.Contains(c.MountFlags, "ro")
}
