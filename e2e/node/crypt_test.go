package node

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// Two KMSs, both of type secret, their KEKs told apart by key prefix in
// the one Secret the calls carry.
const kmsConfig = `{"tenant-a": {"type": "secret"}, "tenant-b": {"type": "secret", "keyPrefix": "tenantBKEK"}}`

// luksHeader is what a LUKS2 header takes of a volume (cryptsetup's
// default for LUKS2: 16 MiB).
const luksHeader = 16 * mib

// plaintext marks data written through an encrypted volume; the image
// must never hold it.
var plaintext = bytes.Repeat([]byte("RBDCSI-PLAINTEXT-MARKER."), 4096)

// needDMCrypt skips where the kernel has no dm-crypt: on this host (fuse
// mounter); scripts/kernel-test.sh runs the encrypted tests in the VM with
// krbd and nbd.
func needDMCrypt(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/module/dm_crypt"); err != nil {
		t.Skipf("this kernel has no dm-crypt (%v); the kernel-test VM loads it", err)
	}
}

// setupCrypt is setup with the KMS configuration and fresh KEKs for both
// KMSs in the calls' secrets. It skips where the kernel has no dm-crypt
// (needDMCrypt).
func setupCrypt(t *testing.T, extraArgs ...string) *env {
	t.Helper()
	needDMCrypt(t)
	conf := filepath.Join(root, "kms-"+strings.NewReplacer("/", "_").Replace(t.Name())+".json")
	harness.Must(t, os.WriteFile(conf, []byte(kmsConfig), 0o644), "write the KMS configuration")
	t.Cleanup(func() { _ = os.Remove(conf) })
	keks := map[string]string{"encryptionKEK.k1": newKEK(t), "tenantBKEK.b1": newKEK(t)}
	// The controller's own Secret holds the KEKs too: it re-wraps with them
	// (a later flag of the same name wins over setup's).
	secretDir := t.TempDir() // the KEK Secret, which holds no Ceph key
	writeSecretKeys(t, secretDir, keks)
	args := []string{"--kms-config", conf, "--kms-secret-dir", secretDir, "--kek-rotation-interval", "1s"}
	e := setup(t, append(args, extraArgs...)...)
	e.keks, e.secretDir = keks, secretDir
	return e
}

// writeSecretKeys adds keys to a directory laid out as a mounted Secret.
func writeSecretKeys(t *testing.T, dir string, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		harness.Must(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600), "write secret key %s", k)
	}
}

func newKEK(t *testing.T) string {
	kek := make([]byte, 32)
	_, err := rand.Read(kek)
	harness.Must(t, err, "drawing a KEK")
	return base64.StdEncoding.EncodeToString(kek)
}

// encrypted are the StorageClass parameters of an encrypted class.
func encrypted(kmsID string) []string {
	return []string{"encrypted", "true", "encryptionKMSID", kmsID}
}

// cryptDevice is the dm-crypt device a published target (file or
// directory) reads through, and the device under it.
func cryptDevice(t *testing.T, staging string, block bool, target string) (dm, backing string) {
	t.Helper()
	if block {
		dm = dmOfBlockFile(t, target)
	} else {
		dm = mountSource(staging)
	}
	if !strings.HasPrefix(dm, "/dev/mapper/rbdcsi-") {
		t.Fatalf("volume reads through %q, not a dm-crypt device of the driver", dm)
	}
	out, err := exec.Command("cryptsetup", "status", filepath.Base(dm)).CombinedOutput()
	harness.Must(t, err, "cryptsetup status: %s", out)
	m := regexp.MustCompile(`(?m)^\s*device:\s+(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("cryptsetup status names no device:\n%s", out)
	}
	return dm, string(m[1])
}

// dmOfBlockFile names the dm device a published block target is.
func dmOfBlockFile(t *testing.T, target string) string {
	t.Helper()
	var st unix.Stat_t
	harness.Must(t, unix.Stat(target, &st), "stat %s", target)
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	name, err := os.ReadFile(filepath.Join("/sys/dev/block", dev, "dm", "name"))
	harness.Must(t, err, "target %s (%s) is no dm device", target, dev)
	return "/dev/mapper/" + strings.TrimSpace(string(name))
}

// TestEncryptedVolumes walks an encrypted ext4, xfs and block volume
// through stage, publish, write and read, online expansion, unstage and a
// restage that finds the data, and checks what Ceph holds: a LUKS2 header
// opened with a cheap PBKDF, no plaintext anywhere in the image, and the
// state recorded as formatted.
func TestEncryptedVolumes(t *testing.T) {
	for _, tc := range []struct {
		kind        string
		size, grown int64
	}{
		{"ext4", 64 * mib, 128 * mib},
		{"xfs", 320 * mib, 400 * mib},
		{"block", 64 * mib, 128 * mib},
	} {
		t.Run(tc.kind, func(t *testing.T) { testEncrypted(t, tc.kind, tc.size, tc.grown) })
	}
}

func testEncrypted(t *testing.T, kind string, size, grown int64) {
	e := setupCrypt(t)
	block := kind == "block"
	c := mountCap(kind, singleWriter)
	if block {
		c = blockCap(singleWriter)
	}
	v := e.createVolume("crypt-"+kind, size, c, encrypted("tenant-a")...)
	if v.VolumeContext["encrypted"] != "true" || v.VolumeContext["encryptionKMSID"] != "tenant-a" {
		t.Fatalf("volume context %v does not carry the encryption", v.VolumeContext)
	}
	if got := e.cryptMeta(v, "state"); got != "prepared" {
		t.Fatalf("state of a new encrypted volume %q, want prepared", got)
	}
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	dm, backing := cryptDevice(t, staging, block, target)
	if !strings.HasPrefix(backing, devicePrefix()) {
		t.Errorf("dm-crypt device sits on %s, want a %s device", backing, devicePrefix())
	}
	dump, err := exec.Command("cryptsetup", "luksDump", backing).CombinedOutput()
	harness.Must(t, err, "cryptsetup luksDump %s: %s", backing, dump)
	for _, want := range []string{`(?m)^Version:\s+2$`, `(?m)PBKDF:\s+pbkdf2`} {
		if !regexp.MustCompile(want).Match(dump) {
			t.Errorf("luksDump of %s lacks %s:\n%s", backing, want, dump)
		}
	}
	if got := e.cryptMeta(v, "state"); got != "formatted" {
		t.Errorf("state after the first stage %q, want formatted", got)
	}

	var want, uuid string
	if block {
		want = writeAt(t, target, 0, plaintext)
	} else {
		uuid = fsUUID(t, dm)
		writeSynced(t, filepath.Join(target, "data"), plaintext)
		want = sum(plaintext)
	}

	// Online expansion: image, then dm-crypt device, then filesystem.
	_, err = e.cc.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: grown}, VolumeCapability: c, Secrets: e.secrets(),
	})
	harness.Must(t, err, "ControllerExpandVolume")
	expand := &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: target, StagingTargetPath: staging,
		VolumeCapability: c, CapacityRange: &csi.CapacityRange{RequiredBytes: grown}}
	_, err = e.nc.NodeExpandVolume(ctx(t), expand)
	switch {
	case block:
		harness.Must(t, err, "NodeExpandVolume")
		if got := deviceSize(t, target); got != grown-luksHeader {
			t.Errorf("block target has %d bytes after growing to %d, want %d (less the LUKS2 header)", got, grown, grown-luksHeader)
		}
	case kind == "xfs" || hasCapSysResource(t):
		harness.Must(t, err, "NodeExpandVolume")
		if total := statfsTotal(t, target); total < (grown-luksHeader)*8/10 {
			t.Errorf("filesystem has %d bytes after growing to %d", total, grown)
		}
	default:
		expectCode(t, err, codes.FailedPrecondition, "online ext4 expansion without CAP_SYS_RESOURCE")
	}

	e.unpublish(v, target)
	e.unstage(v, staging)
	if left := leftovers(e.dir); len(left) > 0 {
		t.Fatalf("left behind after unstage: %v", left)
	}
	e.expectNoPlaintext(v)

	// Restage: opened, not formatted again, the data still there.
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	if block {
		if got := readAt(t, target, 0, len(plaintext)); got != want {
			t.Errorf("after restage the block volume holds other data")
		}
		return
	}
	dm, _ = cryptDevice(t, staging, false, target)
	if got := fsUUID(t, dm); got != uuid {
		t.Errorf("filesystem UUID after restage %q, was %q: the volume was reformatted", got, uuid)
	}
	if got := fileSum(t, filepath.Join(target, "data")); got != want {
		t.Errorf("after restage the file holds other data")
	}
}

// cryptMeta reads rbdcsi.crypt.<key> of the volume's image.
func (e *env) cryptMeta(v *csi.Volume, key string) string {
	e.t.Helper()
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	out, _ := e.c.RBD(append(append([]string{"image-meta", "get", "-p", e.c.Pool}, e.c.NamespaceArgs()...), image, "rbdcsi.crypt."+key)...)
	return strings.TrimSpace(out)
}

// expectNoPlaintext exports the volume's image and looks for the marker.
func (e *env) expectNoPlaintext(v *csi.Volume) {
	e.t.Helper()
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	out := filepath.Join(root, "export-"+image)
	defer os.Remove(out)
	_, err := e.c.RBD(append(append([]string{"export", "--no-progress", "-p", e.c.Pool}, e.c.NamespaceArgs()...), image, out)...)
	harness.Must(e.t, err, "rbd export")
	data, err := os.ReadFile(out)
	harness.Must(e.t, err, "read the export")
	if bytes.Contains(data, []byte("RBDCSI-PLAINTEXT-MARKER")) {
		e.t.Errorf("the image of encrypted volume %s holds the plaintext marker", v.VolumeId)
	}
	if !bytes.HasPrefix(data, []byte("LUKS\xba\xbe")) {
		e.t.Errorf("the image of encrypted volume %s does not start with a LUKS header", v.VolumeId)
	}
}

// A wrong KEK (same ID, other bytes) is PermissionDenied and a missing
// one FailedPrecondition, each naming the KMS, as is a KEK Secret that
// holds a Ceph key; none maps anything or
// changes the volume, which then stages with the right key.
func TestEncryptedVolumeKeyRefusals(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("crypt-keys", 64*mib, c, encrypted("tenant-a")...)
	staging := e.path("staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")

	right := e.keks
	e.keks = map[string]string{"encryptionKEK.k1": newKEK(t)}
	_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	expectCode(t, err, codes.PermissionDenied, "stage with a wrong KEK")
	if err != nil && !strings.Contains(err.Error(), "tenant-a") {
		t.Errorf("the refusal does not name the KMS: %v", err)
	}
	e.keks = nil
	_, err = e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	expectCode(t, err, codes.FailedPrecondition, "stage without a KEK")
	if err != nil && !strings.Contains(err.Error(), "encryptionKEK") {
		t.Errorf("the refusal does not name the secret key it wants: %v", err)
	}
	e.keks = right
	mixed := e.stageReq(v, staging, c)
	maps.Copy(mixed.Secrets, e.c.Secrets())
	_, err = e.nc.NodeStageVolume(ctx(t), mixed)
	expectCode(t, err, codes.FailedPrecondition, "stage with KEKs beside a Ceph key")
	if err != nil && !strings.Contains(err.Error(), "--allow-keks-with-credentials") {
		t.Errorf("the refusal does not say how to proceed: %v", err)
	}
	if left := leftovers(e.dir); len(left) > 0 {
		t.Fatalf("refused stages left: %v", left)
	}
	if got := e.cryptMeta(v, "state"); got != "prepared" {
		t.Fatalf("refused stages changed the state to %q", got)
	}
	e.mountAt(v, "ok", c)
}

// A restore and a clone of an encrypted volume share its LUKS header
// copy-on-write: they open with the same data key, re-wrapped for their
// own KMS, and read the source's data.
func TestEncryptedRestoreAndClone(t *testing.T) {
	e := setupCrypt(t)
	c := mountCap("ext4", singleWriter)
	src := e.createVolume("crypt-src", 64*mib, c, encrypted("tenant-a")...)
	dir := e.mountAt(src, "src", c)
	writeSynced(t, filepath.Join(dir, "data"), plaintext)
	snap, err := e.cc.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "crypt-snap", SourceVolumeId: src.VolumeId, Secrets: e.secrets()})
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() {
		_, err := e.cc.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId, Secrets: e.secrets()})
		harness.Must(t, err, "DeleteSnapshot")
	})
	restored := e.createFrom("crypt-restore", 64*mib, c, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}, encrypted("tenant-b")...)
	if got := e.cryptMeta(restored, "kms"); got != "tenant-b" {
		t.Errorf("the restore's KMS is %q, want tenant-b", got)
	}
	expectContent(t, filepath.Join(e.mountAt(restored, "restored", c), "data"), plaintext, "the restore into another KMS")
	clone := e.createFrom("crypt-clone", 64*mib, c, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}}, encrypted("tenant-a")...)
	expectContent(t, filepath.Join(e.mountAt(clone, "clone", c), "data"), plaintext, "the clone")

	// Each child's first stage checked the header it inherited and bound it:
	// the same header under the same DEK, so the source's MAC.
	mac := e.cryptMeta(src, "header")
	if !strings.HasPrefix(mac, "v1.") {
		t.Fatalf("the source's header MAC is %q", mac)
	}
	for name, v := range map[string]*csi.Volume{"restore": restored, "clone": clone} {
		if got, state := e.cryptMeta(v, "header"), e.cryptMeta(v, "state"); got != mac || state != "formatted" {
			t.Errorf("the %s's header MAC %q and state %q after its first stage, want the source's and formatted", name, got, state)
		}
	}
}

// A plugin killed right after luksFormat, before the state is recorded:
// the volume keeps state prepared with a LUKS header on it, and the next
// stage opens that header (never formats it again) and records formatted.
func TestEncryptedCrashAfterFormat(t *testing.T) {
	e := setupCrypt(t, "--test-crash-at", "NodeStage:luksFormatted")
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("crypt-crash", 64*mib, c, encrypted("tenant-a")...)
	staging := e.path("staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	if _, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c)); err == nil {
		t.Fatal("NodeStage survived --test-crash-at NodeStage:luksFormatted")
	}
	e.p.Kill()
	if got := e.cryptMeta(v, "state"); got != "prepared" {
		t.Fatalf("state after a crash right after the format %q, want prepared", got)
	}
	e.p.Without("--test-crash-at")
	e.p.Start()
	e.stageRetryingAborted(v, staging, c)
	if got := e.cryptMeta(v, "state"); got != "formatted" {
		t.Errorf("state after the stage that followed the crash %q, want formatted", got)
	}
	target := e.path("target")
	e.publish(v, staging, target, c, false)
	writeSynced(t, filepath.Join(target, "after-crash"), []byte("ok"))
}
