package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
)

// diskFormat says what is on a device: a filesystem type, partitionTable
// for a partitioned disk, or "" for nothing blkid recognises.
func (n *Node) diskFormat(ctx context.Context, device string) (string, error) {
	// -p probes the device itself (no cache); TYPE and PTTYPE cover
	// filesystems, other signatures (LVM, RAID, swap) and partition tables.
	out, err := n.run.Run(ctx, "blkid", blkidArgs(device)...)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			return "", nil // nothing found
		}
		return "", fmt.Errorf("probing %s for a filesystem: %w", device, err)
	}
	return parseBlkid(string(out))
}

func blkidArgs(device string) []string {
	return []string{"-p", "-s", "TYPE", "-s", "PTTYPE", "-o", "export", device}
}

const partitionTable = "partition table"

// parseBlkid reads `blkid -o export` lines (KEY=value). Anything blkid
// finds counts: the device is then never formatted.
func parseBlkid(out string) (string, error) {
	var fsType, ptType string
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "TYPE":
			fsType = v
		case "PTTYPE":
			ptType = v
		}
	}
	switch {
	case ptType != "":
		return partitionTable + " (" + ptType + ")", nil
	case fsType == "":
		// blkid succeeded yet named nothing: do not take that for empty.
		return "", fmt.Errorf("blkid found a signature but no type (%.100q)", out)
	}
	return fsType, nil
}

// blankness is what an image about to be formatted is known to hold
// where it was never written.
type blankness int

const (
	// blankUnknown: written before, maybe (a static image, a restore or
	// clone of one without a filesystem, a context from before
	// createdEmpty).
	blankUnknown blankness = iota
	// blankFresh: created empty and never written, but read through
	// dm-crypt, where unwritten blocks decrypt to noise, not zeros.
	blankFresh
	// blankZeros: created empty, read as it is: every block is zeros.
	blankZeros
)

// mkfsArgs builds the mkfs argv: fast defaults unless the mkfsOptions
// parameter says otherwise. No force flags: an existing filesystem has
// already been ruled out by diskFormat, and mkfs.xfs checks once more.
// prezeroed says mkfs.ext4 takes assume_storage_prezeroed (e2fsprogs 1.47).
func mkfsArgs(fsType string, options []string, device string, devBytes int64, blank blankness, prezeroed bool) (string, []string) {
	args := options
	if len(args) == 0 {
		switch fsType {
		case "ext4":
			// No discard (a thin image holds no data to drop), no blocks
			// reserved for root; -G 4096 packs the group metadata of large
			// filesystems into few RBD objects (a 1 TiB mkfs touches 28
			// instead of 535).
			args = []string{"-m0", "-E", ext4Init(blank, prezeroed), "-G", "4096"}
		case "xfs":
			args = []string{"-K"} // no discard
			// A 64 MiB log whatever the size. mkfs.xfs zeroes its log,
			// which it sizes with the filesystem (512 MiB at 1 TiB, 64 MiB
			// from its 300 MiB minimum to ~100 GiB): a fixed one keeps a
			// large volume's format as quick as a small one's, and
			// xfs_growfs never grows the log, so a volume created small
			// and expanded has this log anyway. Below 1 GiB mkfs.xfs's own
			// choice is the same, and its own words for a volume too small.
			if devBytes >= xfsFixedLogFrom {
				args = append(args, "-l", "size=64m")
			}
		}
	}
	return "mkfs." + fsType, append(append([]string{}, args...), device)
}

// ext4Init chooses what mkfs.ext4 leaves unzeroed. Inode tables left to
// lazy init are zeroed by the kernel after mount (ext4lazyinit): on a thin
// image that allocates 2 MiB per 128 MiB group, 16 GiB of a 1 TiB volume,
// wherever the device cannot write zeros without writing them (rbd-fuse's
// loop device, dm-crypt). On an image that reads as zeros,
// assume_storage_prezeroed skips that for good and marks the tables
// zeroed. A journal left unzeroed is safe only on an image never written:
// a lazily initialised one could replay an old filesystem's journal.
func ext4Init(blank blankness, prezeroed bool) string {
	switch {
	case blank == blankZeros && prezeroed:
		return "nodiscard,assume_storage_prezeroed=1"
	case blank == blankUnknown:
		return "nodiscard,lazy_itable_init=1"
	}
	return "nodiscard,lazy_itable_init=1,lazy_journal_init=1"
}

// E2fsprogsPrezeroed says whether `mke2fs -V` output names a release that
// takes -E assume_storage_prezeroed (1.47.0 and later).
func E2fsprogsPrezeroed(versionOutput string) bool {
	// "mke2fs 1.47.0 (5-Feb-2023)"
	fields := strings.Fields(versionOutput)
	if len(fields) < 2 || fields[0] != "mke2fs" {
		return false
	}
	parts := strings.SplitN(fields[1], ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 1 || major == 1 && minor >= 47
}

// xfsFixedLogFrom is the device size from which xfs gets a fixed log.
const xfsFixedLogFrom = 1 << 30

// growArgs builds the online-grow command: resize2fs takes the device,
// xfs_growfs the mount point.
func growArgs(fsType, device, mountPoint string) (string, []string, error) {
	switch fsType {
	case "ext4":
		return "resize2fs", []string{device}, nil
	case "xfs":
		return "xfs_growfs", []string{mountPoint}, nil
	}
	return "", nil, fmt.Errorf("cannot grow filesystem %q", fsType)
}

// growExt4Offline grows an unmounted ext4 filesystem to its device when
// the device is clearly larger (an expansion while the volume was not
// staged). resize2fs insists on a fresh check first; e2fsck -p only fixes
// what is safe to fix unattended and fails otherwise.
func (n *Node) growExt4Offline(ctx context.Context, device string) error {
	out, err := n.run.Run(ctx, "dumpe2fs", "-h", device)
	if err != nil {
		return fmt.Errorf("reading the ext4 superblock of %s: %w", device, err)
	}
	fsBytes, err := parseExt4Size(string(out))
	if err != nil {
		return err
	}
	devBytes, err := blockdev.Size(device)
	if err != nil {
		return errors.New(deviceGone(device, err))
	}
	if devBytes <= fsBytes+max(4<<20, fsBytes/100) {
		return nil // fills the device (up to ext4's rounding)
	}
	if _, err := n.run.Run(ctx, "e2fsck", "-f", "-p", device); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 { // 1: errors fixed
			return fmt.Errorf("checking the filesystem on %s before growing it (e2fsck -f -p found errors it may not fix unattended: with the volume unstaged, map its image by hand and run e2fsck -f on it): %w", device, err)
		}
	}
	if _, err := n.run.Run(ctx, "resize2fs", device); err != nil {
		return fmt.Errorf("growing the filesystem: %w", err)
	}
	return nil
}

// parseExt4Size reads "Block count:" and "Block size:" of dumpe2fs -h.
func parseExt4Size(out string) (int64, error) {
	var count, size int64
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Block count":
			count = n
		case "Block size":
			size = n
		}
	}
	if count <= 0 || size <= 0 {
		return 0, fmt.Errorf("dumpe2fs printed no block count and size")
	}
	return count * size, nil
}

// devNumber is the device number a block device file stands for.
func devNumber(device string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(device, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, fmt.Errorf("%s is not a block device", device)
	}
	return st.Rdev, nil
}

// mountedFrom reports whether path is mounted from device: a filesystem on
// it (st_dev of the mount) or, for raw block, the device node itself bind-
// mounted there (st_rdev). A path mounted from anything else is not ours.
func (n *Node) mountedFrom(path, device string, block bool) (bool, error) {
	mounted, err := n.isMountPoint(path)
	if err != nil || !mounted {
		return false, err
	}
	if device == "" {
		return false, nil
	}
	want, err := devNumber(device)
	if err != nil {
		return false, nil // the device is gone: whatever is mounted is not it
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, mountCheckFailed(path, err)
	}
	if block {
		return st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == want, nil
	}
	return st.Dev == want, nil
}

// isMountPoint is IsMountPoint with "does not exist" as false.
func (n *Node) isMountPoint(path string) (bool, error) {
	mounted, err := n.mounter.IsMountPoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, mountCheckFailed(path, err)
	}
	return mounted, nil
}

// mountCheckFailed says that what is mounted at path cannot be told, and
// why that usually is.
func mountCheckFailed(path string, err error) error {
	if errors.Is(err, unix.ENOTCONN) {
		return fmt.Errorf("checking what is mounted at %s: %w (a FUSE mount that lost its server: a fuse-mapped volume whose rbd-fuse ended when the node plugin restarted; restart the pod)", path, err)
	}
	return fmt.Errorf("checking what is mounted at %s: %w", path, err)
}

// unmountAll unmounts path until it is no mount point (a path may hold
// several stacked mounts after retries by an earlier, crashed plugin).
func (n *Node) unmountAll(path string) error {
	for i := 0; i < 8; i++ {
		mounted, err := n.isMountPoint(path)
		if err != nil || !mounted {
			return err
		}
		if err := n.mounter.Unmount(path); err != nil {
			if strings.Contains(err.Error(), "target is busy") {
				return fmt.Errorf("unmounting %s: %w (a process on the node still uses it: `fuser -vm %s` names it)", path, err, path)
			}
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return fmt.Errorf("%s is still a mount point after 8 unmounts (something mounts it again: `findmnt %s` shows what)", path, path)
}

// pathStatus answers a failed step on a path the CO gave (staging or
// target), with what to check: the kubelet makes these paths, and the
// node plugin reaches them through its mount of the kubelet's directory.
func pathStatus(step, path string, err error) error {
	hint := "the node plugin must see the kubelet's directory (a hostPath mount with Bidirectional propagation)"
	switch {
	case errors.Is(err, unix.ENOTCONN):
		hint = "a FUSE mount there lost its server: a fuse-mapped volume whose rbd-fuse ended (the node plugin restarted); restart the pod"
	case errors.Is(err, unix.EROFS), errors.Is(err, unix.ENOSPC):
		hint = "the kubelet's filesystem on the node is read-only or full"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		hint = "the node plugin must run privileged, as root"
	}
	return status.Errorf(codes.Internal, "%s %s: %v (%s)", step, path, err, hint)
}
