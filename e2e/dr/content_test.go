package dr

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// What a mirrored volume holds reads the same on the other site: an
// encrypted volume (its key record and LUKS2 header travel with the image)
// and a clone once it no longer reads through an unmirrored parent.

// drKMS is both sites' --kms-config: one KMS of type secret, whose KEKs
// the calls' secrets carry (encryptionKEK.<id>). The two sites must hold
// the same KEK: the wrapped data key travels with the image's metadata,
// the KEK does not.
const drKMS = `{"dr-kms": {"type": "secret"}}`

// drPlaintext is written through the encryption; no copy of the image may
// hold it.
var drPlaintext = bytes.Repeat([]byte("RBDCSI-DR-PLAINTEXT-MARKER.\n"), 64*1024/28+1)[:64*1024]

// An encrypted volume made on A opens on B after a planned relocation with
// the same KEK, and reads there what was written on A.
//
// The controller on A draws and wraps the data key (DEK); the node plugin
// on A (rbd-fuse mapper) formats the volume with LUKS2. This host has no
// device-mapper (no dm-crypt: MACHINE.md), so the node's open after the
// format fails here, and the test writes the plaintext through the LUKS2
// volume key itself: the key from `cryptsetup luksDump --dump-volume-key`
// with the DEK, the sectors enciphered by openssl's aes-256-xts as
// dm-crypt's aes-xts-plain64 does (512-byte IV sectors, as LUKS2 sets
// it). It records the header's binding to the DEK as the node does after
// an open. With dm-crypt (a real node), the node's stage opens the volume
// and records that binding itself.
//
// On B, after the relocation, the node plugin of site B stages the volume
// by its ID from A: it finds the key record on B's copy, unwraps the DEK
// with the KEK from the call (bound to the KMS, pool and image name, which
// the copy keeps; its image ID and cluster differ) and accepts the header
// (its binding verifies under that DEK). The plaintext decrypted from B's
// copy is what was written on A; the bytes B holds are not the plaintext.
func TestMirroredEncryptedVolume(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	ca, cb := clusters(t)
	conf := filepath.Join(t.TempDir(), "kms.json")
	harness.Must(t, os.WriteFile(conf, []byte(drKMS), 0o600), "KMS configuration")
	// Calls with a KEK carry no Ceph user (a KEK Secret holds none): the
	// controller acts as its own.
	a := start(t, "a", ca, cb.ClusterID, "--kms-config", conf, "--controller-secret-dir", harness.WriteControllerSecretDir(t, ca))
	b := start(t, "b", cb, ca.ClusterID, "--kms-config", conf, "--controller-secret-dir", harness.WriteControllerSecretDir(t, cb))
	keks := map[string]string{"encryptionKEK.k1": newKEK(t)}

	const size = 32 * mib // a 16 MiB LUKS2 header, 16 MiB of data
	block := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	resp, err := a.cc.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "dr-crypt", CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{block},
		Parameters: a.c.Params("encrypted", "true", "encryptionKMSID", "dr-kms"), Secrets: keks,
	})
	harness.Must(t, err, "CreateVolume of an encrypted volume on A")
	vol := resp.Volume
	image := imageOf(t, vol.VolumeId)
	t.Cleanup(func() { removeEverywhere(t, image, a, b) })
	recA := a.keyRecord(t, image)
	if recA.KMSID != "dr-kms" || !recA.DEK.Bound() {
		t.Fatalf("A's key record %+v: want KMS dr-kms, a bound DEK", recA)
	}

	// A's node formats the volume.
	a.stageEncrypted(t, a.startNode(t, "--kms-config", conf), vol, block, keks)
	hdrA := a.luksHeader(t, image)
	dekA := a.unwrap(t, image, keks)
	if recA = a.keyRecord(t, image); recA.Header == "" {
		// No dm-crypt here: the node's open failed after the format, before
		// it recorded the header's binding. Record it as it would have.
		digest := hdrA.Digest()
		mac, err := kms.NewHeaderMAC(dekA, digest[:])
		harness.Must(t, err, "header MAC")
		recA.Header, recA.State = mac, kms.StateFormatted
		a.setMetadata(t, image, recA.Metadata())
	}
	want := sha(drPlaintext)
	a.writeEncrypted(t, image, dekA, drPlaintext)
	if got := sha(a.readEncrypted(t, image, dekA, len(drPlaintext))); got != want {
		t.Fatalf("A reads %s through its own encryption, wrote %s", got, want)
	}

	// Mirrored, relocated to B without loss.
	harness.Must(t, a.enable(t, vol.VolumeId, nil), "Enable on A")
	b.waitReplaying(t, image)
	sumA := a.sum(t, image)
	a.demoteWhenPulled(t, vol.VolumeId)
	b.promoteWhenArrived(t, vol.VolumeId, nil)
	if got := b.sum(t, image); got != sumA {
		t.Fatalf("B's copy reads %s after the relocation, A held %s", got, sumA)
	}
	if idA, idB := a.imageID(t, image), b.imageID(t, image); idA == idB {
		t.Logf("the copies share the image ID %s", idA) // the binding leaves it out either way
	}

	// The key record travelled with the image.
	if recB := b.keyRecord(t, image); recB != recA {
		t.Fatalf("B's key record %+v, A's %+v: the record did not travel whole", recB, recA)
	}
	// B's node, with the same KEK, unwraps and accepts the header.
	nodeB := b.startNode(t, "--kms-config", conf)
	b.stageEncrypted(t, nodeB, vol, block, keks)
	// And without it, it refuses: the KEK lives on each site, never in Ceph.
	_, err = nodeB.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: filepath.Join(t.TempDir(), "staging"), VolumeCapability: block,
		VolumeContext: vol.VolumeContext, Secrets: map[string]string{"encryptionKEK.k1": newKEK(t)},
	})
	wantCode(t, err, codes.PermissionDenied, "NodeStage on B with another KEK")

	dekB := b.unwrap(t, image, keks)
	if !bytes.Equal(dekA, dekB) {
		t.Fatal("B's key record unwraps to another DEK")
	}
	if got := sha(b.readEncrypted(t, image, dekB, len(drPlaintext))); got != want {
		t.Fatalf("B decrypts %s, A wrote %s", got, want)
	}
	hdrB := b.luksHeader(t, image)
	if hdrB.Digest() != hdrA.Digest() {
		t.Fatal("B's LUKS2 header differs from A's")
	}
	if raw := b.readRaw(t, image, 0, size); bytes.Contains(raw, drPlaintext[:28]) {
		t.Fatal("B's copy holds the plaintext: the volume is not encrypted")
	}

	// Disabled at the primary B once A replays from it, A's copy goes
	// (rbd-mirror removes only a copy it replays); the volume is deleted
	// on B.
	a.waitReplaying(t, image)
	harness.Must(t, b.disable(t, vol.VolumeId), "Disable on B")
	eventually(t, "A's copy removed", 2*time.Minute, func() (bool, string) { return !a.has(image), "still there" })
	_, err = b.cc.DeleteVolume(ctx(t), deleteReq(b, vol.VolumeId))
	harness.Must(t, err, "DeleteVolume on B")
}

// A clone whose parent is not mirrored is refused mirroring until the
// admin flattens it; then it mirrors, relocates, and B reads exactly what
// A held, the parent's data included.
func TestMirroredClone(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	a, b := sites(t)
	const size = 16 * mib
	src := a.createVolume(t, b, "dr-clone-src", size)
	srcSum := a.write(t, imageOf(t, src), 4*mib, size)

	resp, err := a.cc.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "dr-clone", CapacityRange: &csi.CapacityRange{RequiredBytes: size}, Parameters: a.c.Params(), Secrets: a.secrets(),
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		}},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src}}},
	})
	harness.Must(t, err, "CreateVolume from a volume on A")
	id := resp.Volume.VolumeId
	clone := imageOf(t, id)
	t.Cleanup(func() { removeEverywhere(t, clone, a, b) })
	if got := a.sum(t, clone); got != srcSum {
		t.Fatalf("the clone reads %s, its source %s", got, srcSum)
	}
	if a.parent(t, clone) == "" {
		t.Fatal("the clone reads through no parent: nothing to refuse")
	}

	err = a.enable(t, id, nil)
	wantCode(t, err, codes.FailedPrecondition, "Enable of a clone whose parent is not mirrored")
	if !strings.Contains(err.Error(), "rbd flatten "+a.c.Pool+"/"+clone) {
		t.Errorf("the refusal does not say how to flatten: %v", err)
	}
	if out, _ := a.c.RBD("info", a.c.Pool+"/"+clone); strings.Contains(out, "mirroring state: enabled") {
		t.Fatal("a refused enable mirrored the clone")
	}

	// The admin flattens it, as the refusal says.
	out, err := a.c.RBD("flatten", "--no-progress", a.c.Pool+"/"+clone)
	harness.Must(t, err, "rbd flatten: %s", out)
	if p := a.parent(t, clone); p != "" {
		t.Fatalf("the flattened clone still reads through %s", p)
	}
	harness.Must(t, a.enable(t, id, nil), "Enable of the flattened clone")
	b.waitReplaying(t, clone)
	// B's copy holds the parent's data, which the flatten copied in.
	b.waitData(t, clone, srcSum, "B holding the clone's data")
	relocate(t, a, b, id, size, nil)
	// B's copy stands alone: no parent on B.
	if p := b.parent(t, clone); p != "" {
		t.Fatalf("B's copy reads through %s", p)
	}

	a.waitReplaying(t, clone)
	harness.Must(t, b.disable(t, id), "Disable on B")
	eventually(t, "A's copy removed", 2*time.Minute, func() (bool, string) { return !a.has(clone), "still there" })
	_, err = b.cc.DeleteVolume(ctx(t), deleteReq(b, id))
	harness.Must(t, err, "DeleteVolume of the clone on B")
	_, err = a.cc.DeleteVolume(ctx(t), deleteReq(a, src))
	harness.Must(t, err, "DeleteVolume of the source on A")
}

// clusters are the two sites' clusters.
func clusters(t *testing.T) (a, b harness.Cluster) {
	a, err := harness.ClusterFromDir(os.Getenv("DR_A_DIR"))
	harness.Must(t, err, "site a")
	b, err = harness.ClusterFromDir(os.Getenv("DR_B_DIR"))
	harness.Must(t, err, "site b")
	return a, b
}

func newKEK(t *testing.T) string {
	t.Helper()
	kek := make([]byte, 32)
	_, err := rand.Read(kek)
	harness.Must(t, err, "drawing a KEK")
	return base64.StdEncoding.EncodeToString(kek)
}

// parent is the image the site's copy reads through ("" for none).
func (s *site) parent(t *testing.T, image string) string {
	out, err := s.c.RBD("info", "--format", "json", s.c.Pool+"/"+image)
	harness.Must(t, err, "rbd info %s on site %s", image, s.name)
	var info struct {
		Parent *struct {
			Pool, Image, Snapshot string
		} `json:"parent"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &info), "parsing %s", out)
	if info.Parent == nil {
		return ""
	}
	return info.Parent.Pool + "/" + info.Parent.Image + "@" + info.Parent.Snapshot
}

// startNode starts a node plugin on the site (the rbd-fuse mapper), with
// the site's cluster map, as a node user of its own.
func (s *site) startNode(t *testing.T, extra ...string) csi.NodeClient {
	dir := t.TempDir()
	// A user per test: parallel tests must not remove each other's.
	secrets, _, _ := s.c.NodeSecretDir(t, "rbdcsi-dr-"+strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))+"-"+s.name)
	args := []string{"--mode", "node", "--nodeid", "dr-node-" + s.name, "--default-mounter", "fuse",
		"--state-dir", filepath.Join(dir, "state"), "--node-secret-dir", secrets, "--v", "4"}
	p := harness.StartPlugin(t, s.c, append(args, extra...)...)
	t.Cleanup(func() {
		if strings.Contains(p.Logs(), s.c.CSIKey) {
			t.Errorf("site %s: the node plugin's log shows the key", s.name)
		}
	})
	return p.Node()
}

// stageEncrypted stages the encrypted volume through the site's node
// plugin and unstages it. Where the kernel has device-mapper the stage
// succeeds; here it must fail at the dm-crypt open only, after the node
// found the key record, unwrapped the DEK and formatted or accepted the
// header: a key that does not unwrap, or a header that is not the
// volume's, answers PermissionDenied or FailedPrecondition before that.
func (s *site) stageEncrypted(t *testing.T, n csi.NodeClient, vol *csi.Volume, c *csi.VolumeCapability, secrets map[string]string) {
	t.Helper()
	staging := filepath.Join(t.TempDir(), "staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	_, err := n.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: staging, VolumeCapability: c, VolumeContext: vol.VolumeContext, Secrets: secrets,
	})
	_, uerr := n.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: staging})
	harness.Must(t, uerr, "NodeUnstage on site %s", s.name)
	if err == nil {
		return
	}
	_, dmErr := os.Stat("/dev/mapper/control")
	noDM := dmErr != nil || !hasDM()
	if st := status.Convert(err); !noDM || st.Code() == codes.PermissionDenied || st.Code() == codes.FailedPrecondition ||
		!strings.Contains(st.Message(), "device-mapper") {
		t.Fatalf("NodeStage of the encrypted volume on site %s: %v", s.name, err)
	}
	t.Logf("site %s: the node's stage got past the key and the header, and failed where this host lacks dm-crypt: %v", s.name, err)
}
