package node

import (
	"maps"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/config"
)

// A volume created empty reads as zeros, so ext4 is made with nothing left
// for the kernel to zero: every group's inode table is marked zeroed, and
// the image does not grow while it sits staged (lazy init would write
// 2 MiB per 128 MiB group wherever the device cannot write zeros for
// free, as through rbd-fuse). A volume whose context does not say it was
// created empty (a static image, a PV written by hand) gets its journal
// zeroed by mkfs.
func TestFreshExt4LeavesNothingToZero(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("fresh-ext4", 16<<30, c)
	if v.VolumeContext[config.ParamCreatedEmpty] != "true" {
		t.Fatalf("CreateVolume's context does not say the volume was created empty: %v", v.VolumeContext)
	}
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	staging := e.path("fresh")
	e.stage(v, staging, c)
	if !strings.Contains(e.p.Logs(), `assume_storage_prezeroed=1`) {
		t.Errorf("mkfs.ext4 was not told the image is zeros")
	}
	groups, zeroed := itableZeroed(t, mountSource(staging))
	if groups != 128 || zeroed != groups {
		t.Errorf("%d of %d groups' inode tables are marked zeroed, want all of 128", zeroed, groups)
	}
	before := e.usedBytes(image)
	time.Sleep(3 * time.Second) // lazy init wrote 18 MiB in this time through rbd-fuse
	if after := e.usedBytes(image); after > before+(4<<20) {
		t.Errorf("the staged, idle image grew from %d to %d MiB", before>>20, after>>20)
	}
	t.Logf("%s: a staged 16 GiB ext4 volume uses %d MiB", mounter(), before>>20)

	// Grown to 32 GiB: the 128 groups it adds read as zeros too. Online
	// where root may resize (the kernel zeroes their inode tables, with
	// WRITE_ZEROES where the device has it); here offline, at the next
	// stage (resize2fs leaves them for lazy init, which the mount turns
	// off).
	const grown = 32 << 30
	_, err := e.cc.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: grown}, VolumeCapability: c, Secrets: e.c.Secrets(),
	})
	harness.Must(t, err, "ControllerExpandVolume")
	online := hasCapSysResource(t)
	if online {
		_, err := e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{
			VolumeId: v.VolumeId, VolumePath: staging, CapacityRange: &csi.CapacityRange{RequiredBytes: grown},
		})
		harness.Must(t, err, "NodeExpandVolume")
	} else {
		e.unstage(v, staging)
		e.stage(v, staging, c)
	}
	if groups, _ := itableZeroed(t, mountSource(staging)); groups != 256 {
		t.Errorf("grown to 32 GiB, the filesystem has %d groups, want 256", groups)
	}
	grownUse := e.usedBytes(image)
	time.Sleep(3 * time.Second)
	if after := e.usedBytes(image); after > grownUse+(4<<20) {
		t.Errorf("the grown, staged, idle image grew from %d to %d MiB", grownUse>>20, after>>20)
	}
	// The zeroing of 128 inode tables would be 256 MiB.
	if grownUse > before+(32<<20) {
		t.Errorf("growing to 32 GiB (online %v) took the image from %d to %d MiB", online, before>>20, grownUse>>20)
	}
	t.Logf("%s: grown to 32 GiB (online %v), it uses %d MiB", mounter(), online, grownUse>>20)

	unknown := e.createVolume("unknown-ext4", 1<<30, c)
	unknown.VolumeContext = maps.Clone(unknown.VolumeContext)
	delete(unknown.VolumeContext, config.ParamCreatedEmpty)
	e.stage(unknown, e.path("unknown"), c)
	if !strings.Contains(e.p.Logs(), `"nodiscard,lazy_itable_init=1"`) {
		t.Errorf("a volume not known to be created empty was formatted with its journal left unzeroed; log:\n%s", e.p.Logs())
	}
}

// itableZeroed counts an ext4 filesystem's groups and those whose inode
// table is marked zeroed.
func itableZeroed(t *testing.T, device string) (groups, zeroed int) {
	t.Helper()
	// runs: dumpe2fs (e2fsprogs), the group descriptors
	out, err := exec.Command("dumpe2fs", device).Output()
	harness.Must(t, err, "dumpe2fs %s", device)
	for _, line := range strings.Split(string(out), "\n") {
		if groupLine.MatchString(line) { // "Group 3: (Blocks 98304-131071) csum 0x1b2c [INODE_UNINIT, ITABLE_ZEROED]"
			groups++
			if strings.Contains(line, "ITABLE_ZEROED") {
				zeroed++
			}
		}
	}
	return groups, zeroed
}

var groupLine = regexp.MustCompile(`^Group [0-9]+: `)
