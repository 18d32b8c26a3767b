package config

import (
	"fmt"
	"strings"
)

// mountAllowed is the allow-list of mount flags (a StorageClass's or a
// PV's mountOptions), per filesystem, after the options every filesystem
// takes (mountGeneric). The mount runs as root on the node: options that
// name a device or file of the node (ext4's journal_path= and
// journal_dev=, xfs's logdev= and rtdev=), that take the node down
// (errors=panic) or that are meant for debugging a kernel
// (test_dummy_encryption, debug, abort) are not on it. Values are checked
// as the options' man pages (ext4(5), xfs(5)) define them.
var mountAllowed = map[string]map[string]mkfsValue{
	"ext4": {
		"data": mkfsOneOf("journal", "ordered", "writeback"), "errors": mkfsOneOf("continue", "remount-ro"),
		"data_err": mkfsOneOf("ignore", "abort"), "commit": mkfsNumber, "barrier": mkfsBool, "nobarrier": nil,
		"journal_checksum": nil, "nojournal_checksum": nil, "journal_async_commit": nil, "journal_ioprio": mountIOPrio,
		"noload": nil, "norecovery": nil, "user_xattr": nil, "nouser_xattr": nil, "acl": nil, "noacl": nil,
		"orlov": nil, "oldalloc": nil, "bsddf": nil, "minixdf": nil, "grpid": nil, "bsdgroups": nil,
		"nogrpid": nil, "sysvgroups": nil, "resgid": mkfsNumber, "resuid": mkfsNumber,
		"quota": nil, "noquota": nil, "usrquota": nil, "grpquota": nil, "prjquota": nil,
		"inode_readahead_blks": mkfsNumber, "stripe": mkfsNumber, "delalloc": nil, "nodelalloc": nil,
		"max_batch_time": mkfsNumber, "min_batch_time": mkfsNumber, "auto_da_alloc": mkfsBool, "noauto_da_alloc": nil,
		"init_itable": mkfsNumber, "noinit_itable": nil, "discard": nil, "nodiscard": nil,
		"block_validity": nil, "noblock_validity": nil, "dioread_lock": nil, "dioread_nolock": nil,
		"i_version": nil, "nombcache": nil, "nouid32": nil, "inlinecrypt": nil,
		"prefetch_block_bitmaps": nil, "no_prefetch_block_bitmaps": nil,
	},
	"xfs": {
		"allocsize": mkfsSize, "attr2": nil, "noattr2": nil, "discard": nil, "nodiscard": nil,
		"grpid": nil, "bsdgroups": nil, "nogrpid": nil, "sysvgroups": nil, "filestreams": nil,
		"ikeep": nil, "noikeep": nil, "inode32": nil, "inode64": nil, "largeio": nil, "nolargeio": nil,
		"logbufs": mkfsNumber, "logbsize": mkfsSize, "noalign": nil, "norecovery": nil, "nouuid": nil,
		"noquota": nil, "uquota": nil, "usrquota": nil, "quota": nil, "uqnoenforce": nil, "qnoenforce": nil,
		"gquota": nil, "grpquota": nil, "gqnoenforce": nil, "pquota": nil, "prjquota": nil, "pqnoenforce": nil,
		"sunit": mkfsNumber, "swidth": mkfsNumber, "swalloc": nil, "wsync": nil,
	},
}

// mountGeneric are mount(8)'s filesystem-independent options, and the
// SELinux contexts a node with SELinux passes.
var mountGeneric = map[string]mkfsValue{
	"async": nil, "sync": nil, "dirsync": nil, "atime": nil, "noatime": nil, "diratime": nil, "nodiratime": nil,
	"relatime": nil, "norelatime": nil, "strictatime": nil, "nostrictatime": nil, "lazytime": nil, "nolazytime": nil,
	"dev": nil, "nodev": nil, "exec": nil, "noexec": nil, "suid": nil, "nosuid": nil, "nosymfollow": nil,
	"iversion": nil, "noiversion": nil, "silent": nil, "loud": nil, "ro": nil, "rw": nil,
	"context": mountSELinux, "fscontext": mountSELinux, "defcontext": mountSELinux, "rootcontext": mountSELinux,
}

// mountRefused says why the options admins may reach for are refused.
var mountRefused = map[string]string{
	"journal_path": "it names a device of the node", "journal_dev": "it names a device of the node",
	"logdev": "it names a device of the node", "rtdev": "it names a device of the node",
	"errors=panic": "a damaged filesystem would take the whole node down", "abort": "it is for debugging ext4",
	"debug": "it is for debugging ext4", "test_dummy_encryption": "it is for testing the kernel",
	"dax":       "RBD devices have no direct access",
	"usrjquota": "journaled quota files are set up with mkfs -O quota instead", "grpjquota": "journaled quota files are set up with mkfs -O quota instead",
	"sb": "it mounts from a backup superblock: repair with fsck instead",
}

// mountValueOptional take a value or none: ext4's barrier, init_itable
// and auto_da_alloc alone are switches.
var mountValueOptional = map[string]bool{"barrier": true, "init_itable": true, "auto_da_alloc": true}

var (
	mountIOPrio  = mkfsOneOf("0", "1", "2", "3", "4", "5", "6", "7")
	mountSELinux = pattern(`^[A-Za-z0-9_.:-]{1,200}$`, "an SELinux context such as system_u:object_r:container_file_t:s0")
)

// CheckMountOptions checks mount flags, each a name or name=value, against
// the allow-list of fsType; readOnly (a reader-only access mode) refuses
// "rw", which would undo the node's "ro".
func CheckMountOptions(fsType string, flags []string, readOnly bool) error {
	for _, f := range flags {
		if readOnly && f == "rw" {
			return fmt.Errorf("mount flag \"rw\" contradicts the volume's read-only access mode")
		}
		if err := checkMountOption(fsType, f); err != nil {
			return err
		}
	}
	return nil
}

func checkMountOption(fsType, flag string) error {
	fsAllowed, ok := mountAllowed[fsType]
	if !ok {
		return fmt.Errorf("no mount options are known for filesystem %.30q", fsType)
	}
	name, value, hasValue := strings.Cut(flag, "=")
	check, ok := mountGeneric[name]
	if !ok {
		check, ok = fsAllowed[name]
	}
	if !ok {
		why := mountRefused[flag]
		if why == "" {
			why = mountRefused[name]
		}
		if why == "" {
			why = fmt.Sprintf("allowed for %s: the options of mount(8) and %s(5) that change neither the node nor what is mounted", fsType, fsType)
		}
		return fmt.Errorf("mount flag %.40q is refused (%s)", flag, why)
	}
	if check == nil {
		if hasValue {
			return fmt.Errorf("mount flag %.40q: %s takes no value", flag, name)
		}
		return nil
	}
	if !hasValue {
		if mountValueOptional[name] {
			return nil
		}
		return fmt.Errorf("mount flag %.40q needs a value (%s=...)", flag, name)
	}
	if err := check(value); err != nil {
		if why := mountRefused[flag]; why != "" {
			return fmt.Errorf("mount flag %.40q is refused (%s)", flag, why)
		}
		return fmt.Errorf("mount flag %.40q: %w", flag, err)
	}
	return nil
}
