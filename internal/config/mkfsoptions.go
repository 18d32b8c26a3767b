package config

import (
	"fmt"
	"regexp"
	"strings"
)

// mkfsOptions is the allow-list of the mkfsOptions parameter, per
// filesystem. mkfs runs as root on the node, so every flag that names a
// file, a device or a directory (mke2fs -d copies a host directory into
// the volume, mkfs.xfs -l logdev= writes a host disk), or that forces,
// fakes or skips the format, is refused; what is left shapes the new
// filesystem only. Flags are matched as given: "-m0" or "-m 0".

// mkfsValue checks a flag's value; nil means the flag takes none.
type mkfsValue func(v string) error

var (
	mkfsNumber  = pattern(`^[0-9]{1,12}$`, "a whole number")
	mkfsPercent = pattern(`^[0-9]{1,2}(\.[0-9]{1,3})?$`, "a percentage such as 0 or 0.5")
	mkfsSize    = pattern(`^[0-9]{1,12}[kmgtbsKMGT]?$`, "a size such as 4096, 4k or 64m")
	mkfsBool    = pattern(`^[01]$`, "0 or 1")
	mkfsUUID    = pattern(`^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|random|time|clear|generate)$`, "a UUID")
	mkfsWord    = pattern(`^[a-z0-9_-]{1,32}$`, "a word of a-z, 0-9, _ and -")
)

func pattern(re, what string) mkfsValue {
	match := regexp.MustCompile(re).MatchString
	return func(v string) error {
		if !match(v) {
			return fmt.Errorf("%.40q is not %s", v, what)
		}
		return nil
	}
}

func mkfsOneOf(values ...string) mkfsValue {
	return func(v string) error {
		for _, w := range values {
			if v == w {
				return nil
			}
		}
		return fmt.Errorf("%.40q is not one of %s", v, strings.Join(values, ", "))
	}
}

func mkfsLabel(max int) mkfsValue {
	return pattern(fmt.Sprintf(`^[A-Za-z0-9._-]{1,%d}$`, max), fmt.Sprintf("a label of at most %d letters, digits, '.', '_' or '-'", max))
}

// mkfsSub checks a comma-separated list of key[=value] sub-options; a nil
// checker means the key takes no value.
func mkfsSub(keys map[string]mkfsValue) mkfsValue {
	return func(v string) error {
		for _, kv := range strings.Split(v, ",") {
			k, val, hasValue := strings.Cut(kv, "=")
			check, ok := keys[k]
			switch {
			case !ok:
				return fmt.Errorf("sub-option %.40q is not allowed (allowed: %s)", k, strings.Join(sortedKeys(keys), ", "))
			case check == nil && hasValue:
				return fmt.Errorf("sub-option %s takes no value", k)
			case check == nil:
			case !hasValue:
				return fmt.Errorf("sub-option %s needs a value", k)
			default:
				if err := check(val); err != nil {
					return fmt.Errorf("sub-option %s: %w", k, err)
				}
			}
		}
		return nil
	}
}

var mkfsAllowed = map[string]map[string]mkfsValue{
	// mke2fs(8).
	"ext4": {
		"-b": mkfsNumber, "-C": mkfsNumber, "-g": mkfsNumber, "-G": mkfsNumber, "-i": mkfsNumber, "-I": mkfsNumber,
		"-N": mkfsNumber, "-r": mkfsOneOf("0", "1"), "-m": mkfsPercent, "-L": mkfsLabel(16), "-U": mkfsUUID,
		"-T": mkfsWord, "-e": mkfsOneOf("continue", "remount-ro"),
		"-O": pattern(`^\^?[a-z0-9_]{1,32}(,\^?[a-z0-9_]{1,32}){0,31}$`, "a list of features such as ^has_journal,metadata_csum"),
		"-E": mkfsSub(map[string]mkfsValue{
			"stride": mkfsNumber, "stripe_width": mkfsNumber, "stripe-width": mkfsNumber, "resize": mkfsNumber,
			"lazy_itable_init": mkfsBool, "lazy_journal_init": mkfsBool, "packed_meta_blocks": mkfsBool,
			"assume_storage_prezeroed": mkfsBool, "num_backup_sb": mkfsOneOf("0", "1", "2"),
			"root_owner": pattern(`^[0-9]{1,10}:[0-9]{1,10}$`, "uid:gid"), "discard": nil, "nodiscard": nil,
			"orphan_file_size": mkfsNumber, "quotatype": pattern(`^(usrquota|grpquota|prjquota)(:(usrquota|grpquota|prjquota)){0,2}$`, "quota types"),
			"encoding": mkfsWord,
		}),
		"-j": nil, "-q": nil, "-v": nil, "-D": nil,
	},
	// mkfs.xfs(8).
	"xfs": {
		"-b": mkfsSub(map[string]mkfsValue{"size": mkfsSize}),
		"-m": mkfsSub(map[string]mkfsValue{"crc": mkfsBool, "finobt": mkfsBool, "rmapbt": mkfsBool, "reflink": mkfsBool,
			"bigtime": mkfsBool, "inobtcount": mkfsBool, "uuid": mkfsUUID}),
		"-d": mkfsSub(map[string]mkfsValue{"agcount": mkfsNumber, "agsize": mkfsSize, "su": mkfsSize, "sw": mkfsNumber,
			"sunit": mkfsNumber, "swidth": mkfsNumber, "noalign": nil}),
		"-i": mkfsSub(map[string]mkfsValue{"size": mkfsSize, "maxpct": mkfsNumber, "align": mkfsBool, "attr": mkfsOneOf("1", "2"),
			"projid32bit": mkfsBool, "sparse": mkfsBool, "nrext64": mkfsBool}),
		"-l": mkfsSub(map[string]mkfsValue{"size": mkfsSize, "version": mkfsOneOf("1", "2"), "sunit": mkfsNumber, "su": mkfsSize,
			"lazy-count": mkfsBool, "internal": mkfsOneOf("1")}),
		"-n": mkfsSub(map[string]mkfsValue{"size": mkfsSize, "version": mkfsOneOf("2", "ci"), "ftype": mkfsBool}),
		"-s": mkfsSub(map[string]mkfsValue{"size": mkfsSize}),
		"-L": mkfsLabel(12), "-K": nil, "-q": nil,
	},
}

// mkfsRefused says why the flags users reach for first are refused.
var mkfsRefused = map[string]string{
	"-d": "it names a file, device or directory on the node", "-l": "ext4's -l reads a bad-blocks file on the node",
	"-J": "it can put the journal on a device of the node", "-p": "it reads a file on the node",
	"-c": "it reads a file on the node or scans the device", "-z": "it writes an undo file on the node",
	"-r": "a realtime section lives on a device of the node", "-f": "the driver formats only empty devices and never forces",
	"-F": "the driver formats only empty devices and never forces", "-n": "a dry run makes no filesystem",
	"-N": "a dry run makes no filesystem", "-S": "it writes superblocks over an existing filesystem",
	"-t": "the filesystem is the StorageClass's fstype", "-V": "it prints the version only",
}

// CheckMkfsOptions checks mkfs arguments against the allow-list of fsType.
func CheckMkfsOptions(fsType string, args []string) error {
	allowed, ok := mkfsAllowed[fsType]
	if !ok {
		return fmt.Errorf("parameter %s: no mkfs options are known for filesystem %.30q", ParamMkfsOptions, fsType)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a[1] == '-' {
			return fmt.Errorf("parameter %s: %.40q is not a short option of mkfs.%s (give each as -X or -X value)", ParamMkfsOptions, a, fsType)
		}
		flag, value := a[:2], a[2:]
		check, ok := allowed[flag]
		if !ok {
			why := mkfsRefused[flag]
			if why == "" {
				why = "allowed: " + strings.Join(sortedKeys(allowed), " ")
			}
			return fmt.Errorf("parameter %s: mkfs.%s option %s is refused (%s)", ParamMkfsOptions, fsType, flag, why)
		}
		if check == nil {
			if value != "" {
				return fmt.Errorf("parameter %s: mkfs.%s option %s takes no value (give each flag separately)", ParamMkfsOptions, fsType, flag)
			}
			continue
		}
		if value == "" {
			if i+1 == len(args) {
				return fmt.Errorf("parameter %s: mkfs.%s option %s needs a value", ParamMkfsOptions, fsType, flag)
			}
			i++
			value = args[i]
		}
		// "-L -m0" would label the filesystem "-m0" and drop -m0: a value
		// never starts with '-', so every argument that does is a flag.
		if strings.HasPrefix(value, "-") {
			return fmt.Errorf("parameter %s: mkfs.%s option %s needs a value, not %.40q", ParamMkfsOptions, fsType, flag, value)
		}
		if err := check(value); err != nil {
			return fmt.Errorf("parameter %s: mkfs.%s option %s: %w", ParamMkfsOptions, fsType, flag, err)
		}
	}
	return nil
}
