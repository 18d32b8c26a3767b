package node

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

func TestCheckPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/var/lib/kubelet/pods/x/volumes/y": true,
		"":                                  false,
		"relative/path":                     false,
		"/a/../b":                           false,
		"/a/./b":                            false,
		"/a//b":                             false,
		"/a/b/":                             false,
		"/":                                 false,
		"/a\x00b":                           false,
		"/" + strings.Repeat("a", 5000):     false,
	} {
		if err := checkPath("path", p); (err == nil) != ok {
			t.Errorf("checkPath(%.40q) = %v, want ok=%v", p, err, ok)
		}
	}
}

func TestCheckMountFlags(t *testing.T) {
	for _, flags := range [][]string{nil, {"noatime"}, {"discard", "data=ordered", "commit=30"}, {"context=system_u:object_r:container_file_t:s0"}} {
		if err := checkMountFlags(flags); err != nil {
			t.Errorf("%q refused: %v", flags, err)
		}
	}
	for _, flags := range [][]string{
		{"noatime,remount"}, {"ro rw"}, {"-o"}, {"--bind"}, {"bind"}, {"rbind"}, {"remount"}, {"move"},
		{"loop=/dev/loop0"}, {"offset=512"}, {"X-mount.mkdir"}, {"x-systemd.automount"}, {"helper=foo"},
		{`context="a,b"`}, {"a\nb"}, {""}, {"Bind"}, make([]string, 40),
	} {
		if err := checkMountFlags(flags); err == nil {
			t.Errorf("%q accepted", flags)
		}
	}
}

func TestParseCapability(t *testing.T) {
	mode := func(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability_AccessMode {
		return &csi.VolumeCapability_AccessMode{Mode: m}
	}
	mnt := func(fs string, flags ...string) *csi.VolumeCapability_Mount {
		return &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs, MountFlags: flags}}
	}
	block := &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}

	c, err := parseCapability(&csi.VolumeCapability{AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("", "noatime")})
	if err != nil || c.FsType != "ext4" || !slices.Equal(c.MountFlags, []string{"noatime"}) || c.Block {
		t.Errorf("default fs: %+v %v", c, err)
	}
	c, err = parseCapability(&csi.VolumeCapability{AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), AccessType: block})
	if err != nil || !c.Block {
		t.Errorf("block: %+v %v", c, err)
	}
	c, err = parseCapability(&csi.VolumeCapability{AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY), AccessType: mnt("xfs")})
	if err != nil || !c.readerOnly() {
		t.Errorf("reader-only xfs: %+v %v", c, err)
	}
	for name, bad := range map[string]*csi.VolumeCapability{
		"nil":              nil,
		"no access mode":   {AccessType: mnt("ext4")},
		"unknown mode":     {AccessMode: mode(99), AccessType: mnt("ext4")},
		"unknown fs":       {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("btrfs")},
		"no access type":   {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		"multi-writer fs":  {AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), AccessType: mnt("ext4")},
		"smuggling flags":  {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("ext4", "ro,bind")},
		"journal on host":  {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("ext4", "journal_path=/dev/sda")},
		"xfs log on host":  {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("xfs", "logdev=/dev/sda")},
		"panic on errors":  {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("", "errors=panic")},
		"ext4 flag on xfs": {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: mnt("xfs", "data=journal")},
		"rw on read-only":  {AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY), AccessType: mnt("ext4", "rw")},
		"volume mount grp": {AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{VolumeMountGroup: "1000"}}},
	} {
		if _, err := parseCapability(bad); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	a := capSpec{FsType: "ext4", MountFlags: []string{"noatime"}, AccessMode: "SINGLE_NODE_WRITER"}
	b := a
	b.MountFlags = []string{"noatime", "discard"}
	if !a.equal(a) || a.equal(b) {
		t.Errorf("capSpec.equal")
	}
}

func TestVolumeParams(t *testing.T) {
	vol := volid.Volume{ClusterID: "c1", Pool: "rbd", Image: "csi-vol-1"}
	p, err := volumeParams(vol, nil)
	if err != nil || p.ClusterID != "c1" || p.Pool != "rbd" || p.Mounter != "" {
		t.Errorf("no context: %+v %v", p, err)
	}
	p, err = volumeParams(vol, map[string]string{
		"clusterID": "c1", "mounter": "fuse", "mkfsOptions": "-m0 -E nodiscard", "unmapOptions": "force",
		"storage.kubernetes.io/csiProvisionerIdentity": "123-csi", "csi.storage.k8s.io/pod.name": "p",
	})
	if err != nil || p.Mounter != "fuse" || !slices.Equal(p.MkfsOptions, []string{"-m0", "-E", "nodiscard"}) || p.UnmapOptions != "force" {
		t.Errorf("full context: %+v %v", p, err)
	}
	for name, ctx := range map[string]map[string]string{
		"other cluster":    {"clusterID": "c2"},
		"other pool":       {"pool": "other"},
		"unknown mounter":  {"mounter": "magic"},
		"bad mapOptions":   {"mapOptions": "a --id=admin"},
		"long mkfsOptions": {"mkfsOptions": strings.Repeat("-q ", 200)},
	} {
		if _, err := volumeParams(vol, ctx); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestParseBlkid(t *testing.T) {
	for out, want := range map[string]string{
		"DEVNAME=/dev/loop0\nTYPE=ext4\n":    "ext4",
		"DEVNAME=/dev/loop0\nTYPE=xfs\n":     "xfs",
		"DEVNAME=/dev/loop0\nPTTYPE=gpt\n":   "partition table (gpt)",
		"TYPE=LVM2_member\n":                 "LVM2_member",
		"PTTYPE=dos\nTYPE=vfat\nDEVNAME=x\n": "partition table (dos)",
	} {
		if got, err := parseBlkid(out); err != nil || got != want {
			t.Errorf("parseBlkid(%q) = %q %v, want %q", out, got, err, want)
		}
	}
	if got, err := parseBlkid("DEVNAME=/dev/loop0\n"); err == nil {
		t.Errorf("a found signature without a type read as %q", got)
	}
}

func TestMkfsAndGrowArgs(t *testing.T) {
	for _, c := range []struct {
		blank     blankness
		prezeroed bool
		init      string
	}{
		// Created empty, plain: nothing for the kernel to zero later.
		{blankZeros, true, "nodiscard,assume_storage_prezeroed=1"},
		// ... unless mke2fs predates the option.
		{blankZeros, false, "nodiscard,lazy_itable_init=1,lazy_journal_init=1"},
		// Created empty, read through dm-crypt: not zeros, never written.
		{blankFresh, true, "nodiscard,lazy_itable_init=1,lazy_journal_init=1"},
		// Maybe written before: the journal is zeroed.
		{blankUnknown, true, "nodiscard,lazy_itable_init=1"},
	} {
		name, args := mkfsArgs("ext4", nil, "/dev/loop0", 1<<30, c.blank, c.prezeroed)
		if want := []string{"-m0", "-E", c.init, "-G", "4096", "/dev/loop0"}; name != "mkfs.ext4" || !slices.Equal(args, want) {
			t.Errorf("ext4, %d %v: %s %q, want %q", c.blank, c.prezeroed, name, args, want)
		}
	}
	name, args := mkfsArgs("xfs", nil, "/dev/rbd0", 1<<40, blankZeros, true)
	if name != "mkfs.xfs" || !slices.Equal(args, []string{"-K", "-l", "size=64m", "/dev/rbd0"}) {
		t.Errorf("xfs, 1 TiB: %s %q", name, args)
	}
	// Below 1 GiB mkfs.xfs picks 64 MiB itself, or says the volume is too
	// small in its own words (a fixed log would say the log is too big).
	if _, args = mkfsArgs("xfs", nil, "/dev/rbd0", 320<<20, blankZeros, true); !slices.Equal(args, []string{"-K", "/dev/rbd0"}) {
		t.Errorf("xfs, 320 MiB: %q", args)
	}
	opts := []string{"-m1", "-L", "data"}
	if _, args = mkfsArgs("ext4", opts, "/dev/rbd0", 1<<30, blankZeros, true); !slices.Equal(args, []string{"-m1", "-L", "data", "/dev/rbd0"}) || len(opts) != 3 {
		t.Errorf("mkfsOptions: %q", args)
	}
	for _, fs := range []string{"ext4", "xfs"} {
		_, args := mkfsArgs(fs, nil, "/dev/x", 1<<30, blankUnknown, false)
		if slices.Contains(args, "-F") || slices.Contains(args, "-f") {
			t.Errorf("%s is forced: %q", fs, args)
		}
	}
	for out, want := range map[string]bool{
		"mke2fs 1.47.0 (5-Feb-2023)\n\tUsing EXT2FS Library version 1.47.0\n": true,
		"mke2fs 1.47.2 (1-Jan-2025)":                                          true, "mke2fs 2.0.1 (x)": true,
		"mke2fs 1.46.5 (30-Dec-2021)": false, "mke2fs 1.9 (x)": false, "": false, "mke2fs: command not found": false,
	} {
		if got := E2fsprogsPrezeroed(out); got != want {
			t.Errorf("E2fsprogsPrezeroed(%q) = %v", out, got)
		}
	}
	if n, a, _ := growArgs("ext4", "/dev/rbd0", "/stage"); n != "resize2fs" || !slices.Equal(a, []string{"/dev/rbd0"}) {
		t.Errorf("grow ext4: %s %q", n, a)
	}
	if n, a, _ := growArgs("xfs", "/dev/rbd0", "/stage"); n != "xfs_growfs" || !slices.Equal(a, []string{"/stage"}) {
		t.Errorf("grow xfs: %s %q", n, a)
	}
	size, err := parseExt4Size("Filesystem volume name:   <none>\nBlock count:              65536\nBlock size:               1024\n")
	if err != nil || size != 64<<20 {
		t.Errorf("parseExt4Size: %d %v", size, err)
	}
	if _, err := parseExt4Size("garbage"); err == nil {
		t.Errorf("parseExt4Size of garbage")
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/var/lib/kubelet/plugins/x/globalmount", "", "relative", "/a/../b", "/a/./b", "/a//b", "/a/b/", "/\x00", "/" + strings.Repeat("a", 5000)} {
		f.Add(s)
	}
	// An accepted path is one the node can mkdir, mount on and remove
	// without leaving where it was told: absolute, clean, no "..", no NUL,
	// within PATH_MAX, and not the root itself.
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath("path", p) != nil {
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.Contains(p, "\x00") || slices.Contains(strings.Split(p, "/"), "..") ||
			len(p) > 4096 || p == "/" {
			t.Fatalf("checkPath accepted %q", p)
		}
	})
}

// operationFlags turn a mount into another operation (a bind, a move, a
// remount, a loop device) or hand it to users: mount(8).
var operationFlags = []string{"bind", "rbind", "move", "remount", "loop", "offset", "sizelimit", "encryption",
	"helper", "user", "users", "owner", "group", "defaults"}

func FuzzCheckMountFlags(f *testing.F) {
	for _, s := range []string{"noatime", "ro,bind", "context=\"a,b\"", "-o", "remount", "x-systemd.automount", "nodev nosuid", "BIND", "Loop=/dev/loop0", "context=system_u:object_r:foo_t:s0"} {
		f.Add(s)
	}
	// mount(8) gets the flags joined by commas into one -o value: an
	// accepted flag is one option (no ',', no space, quote or control
	// character), not a command-line flag, and none of the options that
	// change what mount does rather than how the filesystem behaves.
	f.Fuzz(func(t *testing.T, flag string) {
		if checkMountFlags([]string{flag}) != nil {
			return
		}
		for _, c := range flag {
			if c <= ' ' || c > '~' || strings.ContainsRune(",\"'\\`$;", c) {
				t.Fatalf("checkMountFlags accepted %q, holding %q", flag, c)
			}
		}
		name, _, _ := strings.Cut(strings.ToLower(flag), "=")
		if flag == "" || len(flag) > 256 || strings.HasPrefix(flag, "-") || strings.HasPrefix(name, "x-") || slices.Contains(operationFlags, name) {
			t.Fatalf("checkMountFlags accepted %q", flag)
		}
	})
}

// The volume context has no imageFeatures: options that need a feature
// were checked at CreateVolume and must not fail the stage.
func TestVolumeParamsTakeOptionsNeedingFeatures(t *testing.T) {
	vol := volid.Volume{ClusterID: "c1", Pool: "rbd", Image: "csi-vol-00000000000000000000"}
	p, err := volumeParams(vol, map[string]string{"clusterID": "c1", "pool": "rbd", "mapOptions": "krbd:lock_on_read"})
	if err != nil || p.MapOptions != "krbd:lock_on_read" {
		t.Errorf("volume context with lock_on_read: %+v, %v", p, err)
	}
}
