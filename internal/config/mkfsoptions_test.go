package config

import (
	"strings"
	"testing"
)

// Every flag of the allow-lists is accepted with a sample value, and the
// hostile or pointless ones are refused naming the flag (docs/security.md
// and docs/reference.md#mkfs-options list the same).
func TestMkfsOptions(t *testing.T) {
	allowed := map[string][]string{
		"ext4": {
			"-b 4096", "-b4096", "-C 16384", "-g 32768", "-G 4096", "-i 16384", "-I 256", "-N 100000", "-r 1",
			"-m0", "-m 0.5", "-L data_01", "-U 0b0c1d2e-3f40-4152-8364-758697a8b9ca", "-U random", "-T largefile",
			"-e remount-ro", "-O ^has_journal,metadata_csum", "-j", "-q", "-v", "-D",
			"-E nodiscard,lazy_itable_init=1,lazy_journal_init=1,stride=16,stripe_width=64,resize=4294967295," +
				"packed_meta_blocks=1,num_backup_sb=2,root_owner=1000:1000,quotatype=usrquota:prjquota,assume_storage_prezeroed=1",
			"-m0 -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 -G 4096",
		},
		"xfs": {
			"-K", "-q", "-L logs", "-b size=4096", "-m crc=1,finobt=1,rmapbt=0,reflink=1,bigtime=1,inobtcount=1,uuid=generate",
			"-d agcount=4,su=64k,sw=4,noalign", "-d sunit=128,swidth=512", "-i size=512,maxpct=5,align=1,attr=2,projid32bit=1,sparse=1,nrext64=0",
			"-l size=64m,version=2,lazy-count=1,internal=1,su=32k", "-n size=8192,version=ci,ftype=1", "-s size=4096",
			"-K -l size=64m",
		},
	}
	for fs, list := range allowed {
		for _, opts := range list {
			if err := CheckMkfsOptions(fs, strings.Fields(opts)); err != nil {
				t.Errorf("mkfs.%s %q refused: %v", fs, opts, err)
			}
		}
	}
	refused := []struct{ fs, opts, names string }{
		// Names a file, device or directory of the node.
		{"ext4", "-d /var/lib/kubelet/pods", "-d"},
		{"ext4", "-l /etc/badblocks", "-l"},
		{"ext4", "-J device=/dev/sda", "-J"},
		{"ext4", "-z /var/undo", "-z"},
		{"ext4", "-c", "-c"},
		{"ext4", "-E offset=4096", "offset"},
		{"ext4", "-E root_owner=0:0,test_fs", "test_fs"},
		{"ext4", "-M /mnt", "-M"},
		{"xfs", "-f -l logdev=/dev/sda,size=64m", "-f"},
		{"xfs", "-l logdev=/dev/sda,size=64m", "logdev"},
		{"xfs", "-l internal=0", "internal"},
		{"xfs", "-d name=/dev/sda", "name"},
		{"xfs", "-d file=1,size=1g", "file"},
		{"xfs", "-r rtdev=/dev/sdb", "-r"},
		{"xfs", "-p /etc/protofile", "-p"},
		{"xfs", "-c options=/etc/mkfs.conf", "-c"},
		// Forces, fakes or skips the format.
		{"ext4", "-F", "-F"},
		{"ext4", "-n", "-n"},
		{"ext4", "-S", "-S"},
		{"xfs", "-N", "-N"},
		{"ext4", "-t ext2", "-t"},
		// Bad forms and values.
		{"ext4", "-e panic", "-e"},
		{"ext4", "-jq", "-j"},
		{"ext4", "--lazy", "--lazy"},
		{"ext4", "nodiscard", "nodiscard"},
		{"ext4", "-b", "-b"},
		{"ext4", "-b big", "-b"},
		{"ext4", "-L ../x", "-L"},
		{"ext4", "-L -m0", "-L"},
		{"ext4", "-T-n", "-T"},
		{"xfs", "-L -f", "-L"},
		{"ext4", "-O has_journal;reboot", "-O"},
		{"xfs", "-L much-too-long-label", "-L"},
		{"xfs", "-m0", "-m"},
		{"xfs", "-K1", "-K"},
		{"xfs", "-l size", "size"},
		{"xfs", "-d agcount=$(reboot)", "agcount"},
		{"btrfs", "-K", "btrfs"},
	}
	for _, c := range refused {
		err := CheckMkfsOptions(c.fs, strings.Fields(c.opts))
		if err == nil || !strings.Contains(err.Error(), c.names) || !strings.Contains(err.Error(), ParamMkfsOptions) {
			t.Errorf("mkfs.%s %q: got %v, want an error naming %s", c.fs, c.opts, err, c.names)
		}
	}
}

// ParseParams holds mkfsOptions against the StorageClass's filesystem.
func TestParseParamsChecksMkfsOptionsForItsFilesystem(t *testing.T) {
	base := func(kv ...string) map[string]string {
		in := map[string]string{"clusterID": "c1", "pool": "rbd"}
		for i := 0; i+1 < len(kv); i += 2 {
			in[kv[i]] = kv[i+1]
		}
		return in
	}
	if _, err := ParseParams(base("mkfsOptions", "-m0 -E nodiscard")); err != nil {
		t.Errorf("ext4 options without an fstype (ext4): %v", err)
	}
	if _, err := ParseParams(base("mkfsOptions", "-K -l size=64m")); err == nil || !strings.Contains(err.Error(), "ext4 when unset") {
		t.Errorf("xfs options without an fstype: %v, want refused as ext4 options", err)
	}
	if _, err := ParseParams(base("mkfsOptions", "-K -l size=64m", "csi.storage.k8s.io/fstype", "xfs")); err != nil {
		t.Errorf("xfs options for xfs: %v", err)
	}
	if _, err := ParseParams(base("mkfsOptions", "-d /var/lib/kubelet/pods")); err == nil {
		t.Error("mke2fs -d accepted")
	}
}
