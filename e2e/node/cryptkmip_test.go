package node

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmip/kmiptest"
)

// kmipKMS is the KMS ID of TestEncryptedWithKMIP's configuration.
const kmipKMS = "kmip-a"

// writeKMIPConfig writes a KMS configuration whose one KMS, kmipKMS, is
// the KMIP server at endpoint, new wraps using key keyID.
func writeKMIPConfig(t *testing.T, path, endpoint, keyID string) {
	t.Helper()
	conf, err := json.Marshal(map[string]map[string]string{kmipKMS: {"type": "kmip", "endpoint": endpoint, "keyID": keyID}})
	harness.Must(t, err, "encode the KMS configuration")
	harness.Must(t, os.WriteFile(path, conf, 0o644), "write the KMS configuration")
}

// An encrypted volume whose KEK lives in a real KMIP server (PyKMIP, on
// 127.0.0.1 beside the plugin): CreateVolume wraps the DEK through the
// server; the node unwraps it there, formats and mounts; a new key named
// keyID (the plugin restarted to read it) has the controller re-wrap the
// record, and the volume then opens to the same data. With the server
// down, a staged volume keeps working, but a stage and a CreateVolume
// answer Unavailable and leave nothing behind: no mapping, no dm-crypt
// device, no mount, no image.
func TestEncryptedWithKMIP(t *testing.T) {
	needDMCrypt(t)
	// Started before the plugin, so that its cleanup (a stop that waits
	// until no process of the server is left) runs after the plugin's.
	srv := kmiptest.Start(t)
	kek1 := srv.NewKEK(t)
	conf := filepath.Join(root, "kms-"+strings.NewReplacer("/", "_").Replace(t.Name())+".json")
	writeKMIPConfig(t, conf, srv.Endpoint, kek1)
	t.Cleanup(func() { _ = os.Remove(conf) })
	// The KMIP client's credentials go in every call's secrets
	// (CreateVolume wraps, the node unwraps) and in the KEK Secret the
	// controller mounts, with which the rotation pass re-wraps; as keks,
	// the checks at the end look for them in logs, command lines and files.
	creds := map[string]string{
		"kmipCA": string(srv.PKI.CA), "kmipClientCert": string(srv.ClientCert), "kmipClientKey": string(srv.ClientKey),
	}
	secretDir := t.TempDir() // the KEK Secret, which holds no Ceph key
	writeSecretKeys(t, secretDir, creds)
	e := setup(t, "--kms-config", conf, "--kms-secret-dir", secretDir, "--kek-rotation-interval", "1s")
	e.keks, e.secretDir = creds, secretDir

	c := mountCap("ext4", singleWriter)
	v := e.createVolume("crypt-kmip", 64*mib, c, encrypted(kmipKMS)...)
	if got := e.cryptMeta(v, "kms"); got != kmipKMS {
		t.Fatalf("the volume's KMS is %q, want %s", got, kmipKMS)
	}
	if dek := e.cryptMeta(v, "dek"); !strings.HasPrefix(dek, "k1."+kek1+".") {
		t.Fatalf("data key wrapped as %.12q..., want by the KMIP server under key %s", dek, kek1)
	}
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	cryptDevice(t, staging, false, target) // fails unless it reads through the driver's dm-crypt device
	writeSynced(t, filepath.Join(target, "data"), plaintext)
	e.unpublish(v, target)
	e.unstage(v, staging)
	e.expectNoPlaintext(v)
	header := e.cryptMeta(v, "header")
	if state := e.cryptMeta(v, "state"); state != "formatted" || !strings.HasPrefix(header, "v1.") {
		t.Fatalf("after the first stage: state %q, header MAC %q; want formatted and a MAC", state, header)
	}

	// Rotation: a new key in the server, named keyID; the controller reads
	// the configuration at start only.
	kek2 := srv.NewKEK(t)
	writeKMIPConfig(t, conf, srv.Endpoint, kek2)
	e.p.Stop()
	e.p.Start()
	waitFor(t, "the controller to re-wrap the data key under key "+kek2, func() bool {
		return strings.HasPrefix(e.cryptMeta(v, "dek"), "k1."+kek2+".")
	})
	if got := e.cryptMeta(v, "header"); got != header {
		t.Errorf("the header MAC changed with the re-wrap: %q, was %q", got, header)
	}
	// The record now names kek2 alone: the data reads back only if the
	// server unwraps it to the same DEK.
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	expectContent(t, filepath.Join(target, "data"), plaintext, "the volume re-wrapped under "+kek2)

	// The server goes down. The staged volume keeps its key in the
	// kernel's dm-crypt table and stays usable.
	harness.Must(t, srv.Stop(), "stopping the KMIP server")
	writeSynced(t, filepath.Join(target, "during-outage"), plaintext)
	e.unpublish(v, target)
	e.unstage(v, staging)
	_, err := e.nc.NodeStageVolume(ctx(t), e.stageReq(v, staging, c))
	expectCode(t, err, codes.Unavailable, "NodeStageVolume with the KMIP server down")
	if err != nil && !strings.Contains(err.Error(), kmipKMS) {
		t.Errorf("the refusal does not name the KMS: %v", err)
	}
	// The key is unwrapped before anything is mapped: nothing to undo.
	if left := leftovers(e.dir); len(left) > 0 {
		t.Errorf("the refused stage left: %v", left)
	}
	if _, err := os.Stat(e.recordPath(v)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused stage left the node's record of the volume (%v)", err)
	}
	// Still the LUKS header the first stage wrote, with no plaintext
	// beside it: the image was neither formatted again nor used as plain.
	e.expectNoPlaintext(v)
	if got, state := e.cryptMeta(v, "header"), e.cryptMeta(v, "state"); got != header || state != "formatted" {
		t.Errorf("after the refused stage: header MAC %q, state %q; want %q and formatted", got, state, header)
	}

	const down = "crypt-kmip-down"
	e.images = append(e.images, e.c.VolumeImage(down)) // the cleanup looks for it in the pool and its trash
	resp, err := e.cc.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: down, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib}, VolumeCapabilities: []*csi.VolumeCapability{c},
		Parameters: e.c.Params(encrypted(kmipKMS)...), Secrets: e.secrets(),
	})
	expectCode(t, err, codes.Unavailable, "CreateVolume with the KMIP server down")
	if err == nil {
		t.Cleanup(func() {
			_, err := e.cc.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: resp.Volume.VolumeId, Secrets: e.secrets()})
			harness.Must(t, err, "DeleteVolume %s", down)
		})
	}
	if slices.Contains(e.c.Images(t), e.c.VolumeImage(down)) {
		t.Errorf("the refused CreateVolume left image %s", e.c.VolumeImage(down))
	}
}
