package config

import (
	"strings"
	"testing"
)

func TestMountOptionsAllowed(t *testing.T) {
	for _, tc := range []struct {
		fs    string
		flags []string
	}{
		{"ext4", nil},
		{"ext4", []string{"noatime", "nodev", "nosuid", "discard", "data=ordered", "commit=30", "errors=remount-ro"}},
		{"ext4", []string{"barrier", "barrier=0", "init_itable", "init_itable=10", "noinit_itable", "journal_ioprio=3"}},
		{"ext4", []string{"context=system_u:object_r:container_file_t:s0", "ro"}},
		{"xfs", []string{"noatime", "nouuid", "allocsize=64k", "logbsize=256k", "logbufs=8", "inode64", "prjquota"}},
		{"xfs", []string{"rw", "lazytime", "discard"}},
	} {
		if err := CheckMountOptions(tc.fs, tc.flags, false); err != nil {
			t.Errorf("%s %q refused: %v", tc.fs, tc.flags, err)
		}
	}
}

// Each refusal names the flag and says why, so an admin can fix the
// StorageClass's mountOptions.
func TestMountOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		fs, flag, why string
	}{
		{"ext4", "journal_path=/dev/sda", "names a device of the node"},
		{"ext4", "journal_dev=2049", "names a device of the node"},
		{"xfs", "logdev=/dev/sda", "names a device of the node"},
		{"xfs", "rtdev=/dev/sdb", "names a device of the node"},
		{"ext4", "errors=panic", "take the whole node down"},
		{"ext4", "abort", "debugging"},
		{"ext4", "test_dummy_encryption", "testing the kernel"},
		{"ext4", "dax", "no direct access"},
		{"xfs", "dax=always", "no direct access"},
		{"ext4", "sb=32768", "backup superblock"},
		{"ext4", "usrjquota=aquota.user", "mkfs -O quota"},
		{"ext4", "nouuid", "allowed for ext4"},
		{"xfs", "data=journal", "allowed for xfs"},
		{"ext4", "data=bogus", "not one of journal, ordered, writeback"},
		{"ext4", "commit=soon", "not a whole number"},
		{"ext4", "noatime=1", "takes no value"},
		{"ext4", "commit", "needs a value"},
		{"ext4", "Noatime", "allowed for ext4"},
		{"ext4", "context=a b", "SELinux context"},
		{"btrfs", "noatime", "no mount options are known"},
	} {
		err := CheckMountOptions(tc.fs, []string{tc.flag}, false)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s %q: %v, want a refusal saying %q", tc.fs, tc.flag, err, tc.why)
		}
	}
	if err := CheckMountOptions("ext4", []string{"noatime", "rw"}, true); err == nil || !strings.Contains(err.Error(), "read-only access mode") {
		t.Errorf("rw on a read-only volume: %v", err)
	}
}
