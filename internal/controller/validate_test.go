package controller

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

func TestSizeFor(t *testing.T) {
	for _, tc := range []struct {
		req, lim, want int64
		invalid, oor   bool
	}{
		{0, 0, DefaultSize, false, false},
		{1, 0, mib, false, false},
		{mib, 0, mib, false, false},
		{mib + 1, 0, 2 * mib, false, false},
		{0, 512 * mib, 512 * mib, false, false},
		{0, 3*gib + 5, DefaultSize, false, false},
		{10, mib, mib, false, false},
		{mib + 1, mib + 2, 0, false, true}, // no whole MiB fits
		{0, 100, 0, false, true},
		{-1, 0, 0, true, false},
		{0, -1, 0, true, false},
		{2 * gib, gib, 0, true, false},
		{MaxSize + 1, 0, 0, false, true},
		{1 << 62, 0, 0, false, true},
	} {
		size, invalid, oor := sizeFor(&csi.CapacityRange{RequiredBytes: tc.req, LimitBytes: tc.lim})
		if size != tc.want || (invalid != nil) != tc.invalid || (oor != nil) != tc.oor {
			t.Errorf("sizeFor(%d, %d) = %d, %v, %v; want %d invalid=%v outOfRange=%v", tc.req, tc.lim, size, invalid, oor, tc.want, tc.invalid, tc.oor)
		}
	}
	if size, _, _ := sizeFor(nil); size != DefaultSize {
		t.Errorf("sizeFor(nil) = %d", size)
	}
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
	}
}

func withFlags(c *csi.VolumeCapability, flags ...string) *csi.VolumeCapability {
	c.GetMount().MountFlags = flags
	return c
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

func TestCheckCapabilities(t *testing.T) {
	ok := [][]*csi.VolumeCapability{
		{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "")},
		{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, "xfs")},
		{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "ext4")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ""), "noatime", "discard", "data=ordered")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs"), "nouuid", "allocsize=64k")},
		{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
		{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "")},
	}
	for _, caps := range ok {
		if err := checkCapabilities(caps); err != nil {
			t.Errorf("refused %v: %v", caps, err)
		}
	}
	bad := [][]*csi.VolumeCapability{
		nil,
		{nil},
		{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}},
		{blockCap(csi.VolumeCapability_AccessMode_Mode(99))},
		{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ntfs")},
		{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "ext4")},
		{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ""), "journal_path=/dev/sda")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs"), "noatime", "logdev=/dev/sda")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4"), "errors=panic")},
		{withFlags(mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, "ext4"), "rw")},
	}
	for _, caps := range bad {
		if err := checkCapabilities(caps); err == nil {
			t.Errorf("accepted %v", caps)
		}
	}
}
