package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// KEK rotation with no node involved: with a new KEK in the Secrets and
// named current, the controller re-wraps the data key in the image's
// metadata while the volume stays mounted and written; the LUKS header is
// untouched, and the volume then stages with the new KEK alone.
func TestEncryptedKEKRotationUnderMountedVolume(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("crypt-rotate", 64*mib, c, encrypted("tenant-a")...)
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	writeSynced(t, filepath.Join(target, "before"), plaintext)
	_, backing := cryptDevice(t, staging, false, target)
	header := luksUUID(t, backing)
	if dek := e.cryptMeta(v, "dek"); !strings.HasPrefix(dek, "v2.k1.") {
		t.Fatalf("data key wrapped as %.12q..., want by k1", dek)
	}

	rotated := map[string]string{"encryptionKEK.k2": newKEK(t), "encryptionKEKCurrent": "k2"}
	writeSecretKeys(t, e.secretDir, rotated)
	maps.Copy(e.keks, rotated)
	waitFor(t, "the controller to re-wrap the data key with k2", func() bool {
		return strings.HasPrefix(e.cryptMeta(v, "dek"), "v2.k2.")
	})
	writeSynced(t, filepath.Join(target, "after"), plaintext)
	expectContent(t, filepath.Join(target, "before"), plaintext, "the volume after the re-wrap")
	if got := luksUUID(t, backing); got != header {
		t.Errorf("LUKS header UUID %s after the rotation, was %s", got, header)
	}

	e.unpublish(v, target)
	e.unstage(v, staging)
	delete(e.keks, "encryptionKEK.k1")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	expectContent(t, filepath.Join(target, "after"), plaintext, "the volume staged with the new KEK alone")
}

func luksUUID(t *testing.T, device string) string {
	t.Helper()
	out, err := exec.Command("cryptsetup", "luksUUID", device).CombinedOutput()
	harness.Must(t, err, "cryptsetup luksUUID %s: %s", device, out)
	return strings.TrimSpace(string(out))
}

// A node plugin restarted after losing a volume's state finds the
// dm-crypt device of that staged block volume, which no record names now,
// and closes it; a dm-crypt device that is not the driver's stays open.
// The unstage that follows (without a record) unmaps the image.
func TestEncryptedStaleDeviceClosedAtStart(t *testing.T) {
	e := setupCrypt(t)
	c := blockCap(singleWriter)
	v := e.createVolume("crypt-stale", 64*mib, c, encrypted("tenant-a")...)
	staging := e.path("staging")
	e.stage(v, staging, c)
	ours := dmNames(t)
	if len(ours) != 1 || !strings.HasPrefix(ours[0], "rbdcsi-") {
		t.Fatalf("dm devices after the stage: %v", ours)
	}
	foreign := e.openForeignCrypt(c)

	e.p.Kill()
	harness.Must(t, os.Remove(e.recordPath(v)), "drop the record of %s", v.VolumeId)
	e.p.Start()
	waitFor(t, "the restarted plugin to close "+ours[0], func() bool { return !slices.Contains(dmNames(t), ours[0]) })
	if !slices.Contains(dmNames(t), foreign) {
		t.Errorf("the restarted plugin closed %s, which is not its own", foreign)
	}
}

// dmNames lists the device-mapper devices of the node.
func dmNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/dm-*/dm/name")
	harness.Must(t, err, "list dm devices")
	var names []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			names = append(names, strings.TrimSpace(string(b)))
		}
	}
	return names
}

// openForeignCrypt opens a plain dm-crypt device that is not the
// driver's, on a plain volume of the test, and closes it when the test
// ends.
func (e *env) openForeignCrypt(c *csi.VolumeCapability) string {
	e.t.Helper()
	v := e.createVolume("not-ours", 16*mib, c)
	staging, target := e.path("foreign-staging"), e.path("foreign-target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	const name = "foreign-test"
	open := exec.Command("cryptsetup", "open", "--type", "plain", "--cipher", "aes-xts-plain64", "--key-size", "256",
		"--key-file", "-", target, name)
	open.Stdin = bytes.NewReader(bytes.Repeat([]byte{1}, 32))
	b, err := open.CombinedOutput()
	harness.Must(e.t, err, "cryptsetup open --type plain: %s", b)
	e.t.Cleanup(func() { _ = exec.Command("cryptsetup", "close", name).Run() })
	return name
}

// recordPath is the node's state file of v (internal/node: the first 16
// bytes of sha256 of the volume ID, in hex).
func (e *env) recordPath(v *csi.Volume) string {
	sum := sha256.Sum256([]byte(v.VolumeId))
	return filepath.Join(e.state, "volumes", hex.EncodeToString(sum[:16])+".json")
}

// Encryption is the mapper's business not at all: a volume mapped with
// rbd-fuse and a loop device (the mapper for kernels without krbd and nbd)
// is encrypted, written and read back like the others. Here it runs in
// the kernel VM beside the suite's own mapper.
func TestEncryptedWithFuseMapper(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("crypt-fuse", 64*mib, c, append(encrypted("tenant-a"), "mounter", "fuse")...)
	staging := e.path("fuse-staging") // mountAt's
	target := e.mountAt(v, "fuse", c)
	if _, backing := cryptDevice(t, staging, false, target); !strings.HasPrefix(backing, "/dev/loop") {
		t.Errorf("dm-crypt device sits on %s, want a loop device of rbd-fuse", backing)
	}
	writeSynced(t, filepath.Join(target, "data"), plaintext)
	e.unpublish(v, target)
	e.unstage(v, staging)
	e.expectNoPlaintext(v)
	target = e.mountAt(v, "fuse", c)
	expectContent(t, filepath.Join(target, "data"), plaintext, "the fuse-mapped volume after a restage")
}

// Discards pass the encryption only where the class allows them: with
// encryptionAllowDiscards a deleted file's space goes back to Ceph at the
// next fstrim; without, the dm-crypt device refuses discards and the
// image keeps its size (what it does not reveal: which blocks are free).
func TestEncryptedDiscards(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)
	for _, allow := range []bool{false, true} {
		params := encrypted("tenant-a")
		if allow {
			params = append(params, "encryptionAllowDiscards", "true")
		}
		v := e.createVolume(fmt.Sprintf("crypt-discards-%v", allow), 64*mib, c, params...)
		image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
		staging := e.path(fmt.Sprintf("staging-%v", allow))
		e.stage(v, staging, c)
		status, err := exec.Command("cryptsetup", "status", filepath.Base(mountSource(staging))).CombinedOutput()
		harness.Must(t, err, "cryptsetup status: %s", status)
		if got := regexp.MustCompile(`(?m)^\s*flags:.*discards`).Match(status); got != allow {
			t.Errorf("allowDiscards %v: the dm-crypt device's flags say discards %v:\n%s", allow, got, status)
		}

		// Enough to tell a trim from noise (the checks allow 8 MiB), and
		// little to encrypt: dm-crypt is slow under emulation.
		const size = 16 * mib
		writeRandom(t, filepath.Join(staging, "data"), size)
		before := e.usedBytes(image)
		harness.Must(t, os.Remove(filepath.Join(staging, "data")), "remove")
		syscall.Sync() // ext4 trims only blocks whose freeing is committed
		out, err := exec.Command("fstrim", "-v", staging).CombinedOutput()
		after := e.usedBytes(image)
		t.Logf("allowDiscards %v: fstrim: %s (%v); rbd du %d -> %d MiB", allow, strings.TrimSpace(string(out)), err, before>>20, after>>20)
		switch {
		case allow && (err != nil || after+size*2/3 > before):
			t.Errorf("with discards allowed, the trim gave back %d of the %d MiB deleted", (before-min(before, after))>>20, size>>20)
		case !allow && (err == nil || after+8*mib < before):
			t.Errorf("without discards allowed, fstrim succeeded (%v) or the image shrank (%d -> %d MiB)", err, before>>20, after>>20)
		}
	}
}
