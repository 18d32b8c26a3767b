package node

import (
	"bytes"
	"crypto/rand"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/luks/lukstest"
)

// A LUKS2 header the driver did not write, put on the image by someone who
// can write the pool but holds no key, is refused by NodeStage with
// FailedPrecondition before anything opens it, and leaves no dm-crypt
// device, mapping or mount: a cipher_null header of cryptsetup's own making
// on a volume never staged; then, on a volume the driver formatted and
// bound, its header with the data segment switched to cipher_null, and a
// header shaped exactly as the driver's own but made with another key.
func TestEncryptedPlantedHeaderRefused(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)

	fresh := e.createVolume("crypt-planted", 64*mib, c, encrypted("tenant-a")...)
	e.onRawDevice(fresh, func(dev string) {
		format := exec.Command("cryptsetup", "luksFormat", "--type", "luks2", "--batch-mode", "--cipher", "cipher_null-ecb",
			"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", dev)
		format.Stdin = strings.NewReader("any passphrase at all")
		if out, err := format.CombinedOutput(); err != nil {
			// A kernel without the null cipher: a header of the driver's
			// shape whose keyslot area is then switched to cipher_null,
			// which opens with any passphrase.
			t.Logf("cryptsetup luksFormat --cipher cipher_null-ecb: %v: %s; planting a cipher_null keyslot instead", err, out)
			formatAsTheDriver(t, dev)
			harness.Must(t, lukstest.RewriteJSON(dev, func(doc map[string]any) {
				doc["keyslots"].(map[string]any)["0"].(map[string]any)["area"].(map[string]any)["encryption"] = "cipher_null-ecb"
			}), "switch the keyslot area of %s to cipher_null", dev)
		}
	})
	e.expectHeaderRefused(fresh, c, `"cipher_null-ecb"`)
	if state, mac := e.cryptMeta(fresh, "state"), e.cryptMeta(fresh, "header"); state != "prepared" || mac != "" {
		t.Errorf("after the refusal: state %q, header MAC %q; want prepared and none", state, mac)
	}

	bound := e.createVolume("crypt-altered", 64*mib, c, encrypted("tenant-a")...)
	staging := e.path("altered-staging")
	e.stage(bound, staging, c)
	e.unstage(bound, staging)
	if mac := e.cryptMeta(bound, "header"); !strings.HasPrefix(mac, "v1.") {
		t.Fatalf("header MAC %q after the first stage, want v1.<MAC>", mac)
	}
	e.onRawDevice(bound, func(dev string) {
		harness.Must(t, lukstest.RewriteJSON(dev, func(doc map[string]any) {
			doc["segments"].(map[string]any)["0"].(map[string]any)["encryption"] = "cipher_null-ecb"
		}), "switch the data segment of %s to cipher_null", dev)
	})
	e.expectHeaderRefused(bound, c, `segment 0 encryption is "cipher_null-ecb"`)

	e.onRawDevice(bound, func(dev string) { formatAsTheDriver(t, dev) })
	e.expectHeaderRefused(bound, c, "rbdcsi.crypt.header")
}

// formatAsTheDriver writes a LUKS2 header on dev with luks.Format's
// arguments and a key of its own.
func formatAsTheDriver(t *testing.T, dev string) {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	harness.Must(t, err, "draw a key")
	format := exec.Command("cryptsetup", "luksFormat", "--type", "luks2", "--batch-mode",
		"--cipher", "aes-xts-plain64", "--key-size", "512", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--hash", "sha256", "--offset", "32768", "--subsystem", "rbdcsi", "--key-file", "-", dev)
	format.Stdin = bytes.NewReader(key)
	out, err := format.CombinedOutput()
	harness.Must(t, err, "cryptsetup luksFormat %s: %s", dev, out)
}

// onRawDevice gives fn the image of encrypted volume v as a plain block
// device, which is how someone with write access to the pool sees it: v
// staged and published without its encryption, unstaged when fn returns.
func (e *env) onRawDevice(v *csi.Volume, fn func(dev string)) {
	e.t.Helper()
	plain := &csi.Volume{VolumeId: v.VolumeId, VolumeContext: maps.Clone(v.VolumeContext)}
	for k := range plain.VolumeContext {
		if strings.HasPrefix(k, "encrypt") {
			delete(plain.VolumeContext, k)
		}
	}
	c := blockCap(singleWriter)
	staging, target := e.path("raw-staging"), e.path("raw-target")
	harness.Must(e.t, os.MkdirAll(staging, 0o750), "mkdir staging")
	_, err := e.nc.NodeStageVolume(ctx(e.t), e.stageReq(plain, staging, c))
	harness.Must(e.t, err, "NodeStageVolume %s without its encryption", v.VolumeId)
	defer e.unstage(plain, staging)
	_, err = e.nc.NodePublishVolume(ctx(e.t), e.publishReq(plain, staging, target, c, false))
	harness.Must(e.t, err, "NodePublishVolume %s without its encryption", v.VolumeId)
	defer e.unpublish(plain, target)
	fn(target)
}

// expectHeaderRefused stages v and expects the refusal of its header,
// saying says, with nothing left on the node.
func (e *env) expectHeaderRefused(v *csi.Volume, c *csi.VolumeCapability, says string) {
	e.t.Helper()
	staging := e.path("refused-staging")
	harness.Must(e.t, os.MkdirAll(staging, 0o750), "mkdir staging")
	_, err := e.nc.NodeStageVolume(ctx(e.t), e.stageReq(v, staging, c))
	if err == nil {
		e.t.Cleanup(func() { e.unstage(v, staging) })
	}
	expectCode(e.t, err, codes.FailedPrecondition, "stage over a LUKS header the driver did not write")
	if err != nil && (!strings.Contains(err.Error(), "is not the one this driver wrote") || !strings.Contains(err.Error(), says)) {
		e.t.Errorf("the refusal does not say the header is not the driver's, or what it found (%s): %v", says, err)
	}
	if left := leftovers(e.dir); len(left) > 0 {
		e.t.Fatalf("a refused stage left: %v", left)
	}
	for _, name := range dmNames(e.t) {
		if strings.HasPrefix(name, "rbdcsi-") {
			e.t.Errorf("dm-crypt device %s is open after a refused stage", name)
		}
	}
	if _, err := os.Stat(e.recordPath(v)); !os.IsNotExist(err) {
		e.t.Errorf("a refused stage left its state record (%v)", err)
	}
}
