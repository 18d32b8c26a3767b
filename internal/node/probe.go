package node

// Probes of the machine's tools, for the plugin's start and its health
// checks.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// Tools finds the node's programs and asks them what they are
// (command.ExecRunner is the real one).
type Tools interface {
	LookPath(name string) (string, error)
	// RunCombined runs a command and returns its stdout and stderr.
	RunCombined(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ToolsPresent checks the commands every stage needs, plus the default
// mounter's. Kernel support is not checked here: a liveness probe must
// not restart the plugin forever for a missing module.
func ToolsPresent(t Tools, defaultMounter string) error {
	tools := []string{"mount", "umount", "blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "dumpe2fs", "e2fsck", "xfs_growfs"}
	switch defaultMounter {
	case mapper.KRBD:
		tools = append(tools, "rbd")
	case mapper.NBD:
		tools = append(tools, "rbd", "rbd-nbd")
	case mapper.Fuse:
		tools = append(tools, "rbd-fuse", "losetup")
	}
	var missing []string
	for _, name := range tools {
		if _, err := t.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return errors.New("tools missing on the node: " + strings.Join(missing, ", "))
	}
	return nil
}

// MkfsPrezeroed asks mke2fs its version (it prints it on stderr): whether
// it takes -E assume_storage_prezeroed (Options.MkfsPrezeroed). False if
// it cannot tell, which keeps the lazy init every release takes.
func MkfsPrezeroed(ctx context.Context, t Tools) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// runs: mke2fs (its version)
	out, err := t.RunCombined(ctx, "mke2fs", "-V")
	ok := err == nil && E2fsprogsPrezeroed(string(out))
	klog.InfoS("mkfs.ext4 of volumes created empty", "assumeStoragePrezeroed", ok, "mke2fs", strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]))
	return ok
}

// StateDirWritable proves the records can still be written (a full or
// read-only disk would fail every stage).
func StateDirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
