package controller

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

// The controller's side of encrypted volumes on the real cluster: the key
// record in the real image's metadata, re-wrapped for a restore into a
// class of another KMS, refusals, and no key material in the log.

// cryptKMSConfig is the plugin's --kms-config: tenant-a's KEKs under the
// default prefix, tenant-b's under kekB.
const cryptKMSConfig = `{"tenant-a": {"type": "secret"}, "tenant-b": {"type": "secret", "keyPrefix": "kekB"}}`

type cryptEnv struct {
	env
	kekA, kekB string
	kms        kms.Config
}

// setupCrypt starts a controller with the KMS configuration, at the
// highest verbosity, and draws the KEKs of the run.
func setupCrypt(t *testing.T, extra ...string) cryptEnv {
	c := harness.LoadCluster(t)
	cfgFile := filepath.Join(t.TempDir(), "kms.json")
	harness.Must(t, os.WriteFile(cfgFile, []byte(cryptKMSConfig), 0o600), "KMS configuration")
	cfg, err := kms.ParseConfig([]byte(cryptKMSConfig))
	harness.Must(t, err, "KMS configuration")
	args := append([]string{"--mode", "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, c),
		"--kms-config", cfgFile, "--v", "10"}, extra...)
	p := harness.StartPlugin(t, c, args...)
	t.Cleanup(func() { c.ExpectNoImages(t) })
	return cryptEnv{env: env{c: c, p: p, cc: p.Controller()}, kekA: newKEK(t), kekB: newKEK(t), kms: cfg}
}

func newKEK(t *testing.T) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	harness.Must(t, err, "KEK")
	return base64.StdEncoding.EncodeToString(b)
}

// secrets are a KEK Secret with the KEKs of the named tenants ("a", "b"),
// as an encrypted class names it; with none, the CSI user's, as a class
// that names a Ceph user of its own does. The controller acts as its own
// user (--controller-secret-dir) for calls whose secrets name none.
func (e cryptEnv) secrets(tenants ...string) map[string]string {
	if len(tenants) == 0 {
		return e.c.Secrets()
	}
	s := map[string]string{}
	for _, t := range tenants {
		switch t {
		case "a":
			s["encryptionKEK.a1"] = e.kekA
		case "b":
			s["kekB.b1"] = e.kekB
		}
	}
	return s
}

// createIn is CreateVolume of 8 MiB in a class encrypted with kmsID ("" plain).
func (e cryptEnv) createIn(t *testing.T, name, kmsID string, sec map[string]string, src *csi.VolumeContentSource) (*csi.Volume, error) {
	params := e.c.Params()
	if kmsID != "" {
		params = e.c.Params("encrypted", "true", "encryptionKMSID", kmsID)
	}
	resp, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCap(),
		Parameters: params, Secrets: sec, VolumeContentSource: src,
	})
	if err != nil {
		for _, k := range []string{e.kekA, e.kekB} {
			if strings.Contains(err.Error(), k) {
				t.Errorf("CreateVolume %s: the error shows a KEK", name)
			}
		}
		return nil, err
	}
	return resp.Volume, nil
}

func (e cryptEnv) mustCreateIn(t *testing.T, name, kmsID string, sec map[string]string, src *csi.VolumeContentSource) *csi.Volume {
	t.Helper()
	v, err := e.createIn(t, name, kmsID, sec, src)
	harness.Must(t, err, "CreateVolume %s", name)
	t.Cleanup(func() { e.delete(t, v.VolumeId) })
	return v
}

// imageMeta reads a volume's image metadata with rbd image-meta list.
func (e cryptEnv) imageMeta(t *testing.T, volumeID string) map[string]string {
	t.Helper()
	args := append([]string{"image-meta", "list", "--format", "json", e.c.Pool + "/" + imageOf(t, volumeID)}, e.c.NamespaceArgs()...)
	out, err := e.c.RBD(args...)
	harness.Must(t, err, "rbd image-meta list")
	md := map[string]string{}
	if strings.TrimSpace(out) != "" {
		harness.Must(t, json.Unmarshal([]byte(out), &md), "image-meta JSON %q", out)
	}
	return md
}

// volumeKey reads a volume's key record from the real image and unwraps
// its DEK with the run's KEKs.
func (e cryptEnv) volumeKey(t *testing.T, volumeID string) (kms.VolumeKey, []byte) {
	t.Helper()
	return e.volumeKeyAs(t, volumeID, imageOf(t, volumeID))
}

// binding is what the DEK of a volume created as image is bound to.
func (e cryptEnv) binding(kmsID, image string) kms.Binding {
	return kms.Binding{KMSID: kmsID, Pool: e.c.Pool, Namespace: e.c.Namespace, Image: image}
}

// volumeKeyAs is volumeKey of an image created as another (a hidden one).
func (e cryptEnv) volumeKeyAs(t *testing.T, volumeID, created string) (kms.VolumeKey, []byte) {
	t.Helper()
	key, ok, err := kms.ReadVolumeKey(e.imageMeta(t, volumeID))
	if err != nil || !ok {
		t.Fatalf("volume %s has no valid key record: ok %v, %v", volumeID, ok, err)
	}
	keys, err := e.kms.Open(key.KMSID, e.secrets("a", "b"))
	harness.Must(t, err, "open KMS %s", key.KMSID)
	dek, err := keys.Unwrap(harness.Ctx(t), key.DEK, e.binding(key.KMSID, created))
	harness.Must(t, err, "unwrap the DEK of %s", volumeID)
	return key, dek
}

// expectNoKeysLogged fails if the plugin log shows a KEK or a DEK in any
// usual encoding.
func (e cryptEnv) expectNoKeysLogged(t *testing.T, deks ...[]byte) {
	t.Helper()
	logs := e.p.Logs()
	if !strings.Contains(logs, "CreateVolume") {
		t.Fatal("the plugin log shows no calls: is --v 10 still the verbosity that logs them?")
	}
	secrets := []string{e.kekA, e.kekB}
	for _, d := range deks {
		secrets = append(secrets, base64.StdEncoding.EncodeToString(d), base64.RawURLEncoding.EncodeToString(d), hex.EncodeToString(d))
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Error("key material is in the plugin log")
		}
	}
}

// An encrypted CreateVolume writes its key record to the real image; a
// retry keeps it; a restore into a class of another KMS carries the same
// DEK wrapped by that KMS, in state prepared; a Block expand asks for the
// node; every call leaves no key in the log, and the test no image.
func TestCryptCreateAndRestoreRewrap(t *testing.T) {
	e := setupCrypt(t)
	watch := harness.WatchSecret(e.kekA, e.p)
	src := e.mustCreateIn(t, "crypt-src", "tenant-a", e.secrets("a"), nil)
	if vc := src.VolumeContext; vc["encrypted"] != "true" || vc["encryptionKMSID"] != "tenant-a" {
		t.Fatalf("volume context %v lacks the encryption", vc)
	}
	key, dek := e.volumeKey(t, src.VolumeId)
	if key.KMSID != "tenant-a" || key.State != kms.StatePrepared || key.DEK.KEKID() != "a1" {
		t.Fatalf("key record %+v", key)
	}
	again, err := e.createIn(t, "crypt-src", "tenant-a", e.c.Secrets(), nil)
	harness.Must(t, err, "retry without the KEK")
	if k, _ := e.volumeKey(t, src.VolumeId); again.VolumeId != src.VolumeId || k != key {
		t.Fatalf("the retry returned %s and record %+v; first %s and %+v", again.VolumeId, k, src.VolumeId, key)
	}
	_, err = e.createIn(t, "crypt-src", "tenant-b", e.secrets("a", "b"), nil)
	wantCode(t, err, codes.AlreadyExists, "the same name with another KMS")

	// The node formats the source and says so; the restore is prepared.
	args := append([]string{"image-meta", "set", e.c.Pool + "/" + imageOf(t, src.VolumeId), kms.MetaState, string(kms.StateFormatted)}, e.c.NamespaceArgs()...)
	_, err = e.c.RBD(args...)
	harness.Must(t, err, "rbd image-meta set")
	snap, err := e.snapshot(t, "crypt-snap", src.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() { e.deleteSnapshot(t, snap.SnapshotId) })
	restore := e.mustCreateIn(t, "crypt-restore", "tenant-b", e.secrets("a", "b"), fromSnapshot(snap.SnapshotId))
	rkey, rdek := e.volumeKey(t, restore.VolumeId)
	if rkey.KMSID != "tenant-b" || rkey.DEK.KEKID() != "b1" || rkey.State != kms.StatePrepared {
		t.Fatalf("the restore's record %+v, want KMS tenant-b, KEK b1, prepared", rkey)
	}
	if !bytes.Equal(rdek, dek) {
		t.Fatal("the restore's DEK is not its source's")
	}
	clone := e.mustCreateIn(t, "crypt-clone", "tenant-a", e.secrets("a"), fromVolume(src.VolumeId))
	if ckey, cdek := e.volumeKey(t, clone.VolumeId); !bytes.Equal(cdek, dek) || ckey.KMSID != "tenant-a" || ckey.DEK == key.DEK {
		t.Fatalf("the clone's record %+v does not re-wrap its source's DEK", ckey)
	}
	if names := snapNames(t, e.env, src.VolumeId); len(names) != 1 {
		t.Fatalf("the clone left snapshots on its source: %v", names)
	}

	resp, err := e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: restore.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 * mib}, Secrets: e.c.Secrets(),
		VolumeCapability: &csi.VolumeCapability{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		},
	})
	harness.Must(t, err, "ControllerExpandVolume")
	if !resp.NodeExpansionRequired {
		t.Error("an encrypted Block volume's expand does not ask for the node (cryptsetup resize)")
	}
	if seen := watch(); len(seen) > 0 {
		t.Errorf("a KEK was visible in /proc: %v", seen)
	}
	e.expectNoKeysLogged(t, dek)
}

// plain -> encrypted and encrypted -> plain are refused at CreateVolume,
// a source whose KMS's KEKs the secret lacks too, a source whose key
// record was copied from another image, and a class of a KMS the
// configuration lacks; none leaves an image or snapshot behind.
func TestCryptRefusals(t *testing.T) {
	e := setupCrypt(t)
	enc := e.mustCreateIn(t, "crypt-enc", "tenant-a", e.secrets("a"), nil)
	plain := e.mustCreateIn(t, "crypt-plain", "", e.c.Secrets(), nil)
	// What a pool writer without the KEK could do: copy a wrapped DEK
	// onto another encrypted image, so that it opens with the copy.
	copied := e.mustCreateIn(t, "crypt-copied", "tenant-a", e.secrets("a"), nil)
	args := append([]string{"image-meta", "set", e.c.Pool + "/" + imageOf(t, copied.VolumeId), kms.MetaDEK, e.imageMeta(t, enc.VolumeId)[kms.MetaDEK]}, e.c.NamespaceArgs()...)
	_, err := e.c.RBD(args...)
	harness.Must(t, err, "rbd image-meta set")
	encSnap, err := e.snapshot(t, "crypt-enc-snap", enc.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() { e.deleteSnapshot(t, encSnap.SnapshotId) })
	plainSnap, err := e.snapshot(t, "crypt-plain-snap", plain.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() { e.deleteSnapshot(t, plainSnap.SnapshotId) })
	before := e.c.Images(t)
	mixed := e.c.Secrets()
	maps.Copy(mixed, e.secrets("a"))

	for _, tc := range []struct {
		name, kms string
		sec       map[string]string
		src       *csi.VolumeContentSource
		code      codes.Code
		says      string
	}{
		{"encrypted snapshot into a plain class", "", e.c.Secrets(), fromSnapshot(encSnap.SnapshotId), codes.InvalidArgument, "must be encrypted too"},
		{"encrypted volume into a plain class", "", e.c.Secrets(), fromVolume(enc.VolumeId), codes.InvalidArgument, "must be encrypted too"},
		{"plain snapshot into an encrypted class", "tenant-a", e.secrets("a"), fromSnapshot(plainSnap.SnapshotId), codes.InvalidArgument, "not encrypted"},
		{"plain volume into an encrypted class", "tenant-a", e.secrets("a"), fromVolume(plain.VolumeId), codes.InvalidArgument, "not encrypted"},
		{"no KEK of the source's KMS", "tenant-b", e.secrets("b"), fromSnapshot(encSnap.SnapshotId), codes.FailedPrecondition, "tenant-a"},
		{"no KEK at all", "tenant-a", e.c.Secrets(), nil, codes.FailedPrecondition, "encryptionKEK."},
		{"a key record copied from another image", "tenant-a", e.secrets("a"), fromVolume(copied.VolumeId), codes.FailedPrecondition, "copied from another image"},
		{"unknown KMS", "tenant-z", e.secrets("a"), nil, codes.InvalidArgument, "tenant-z"},
		{"KEKs beside a Ceph key", "tenant-a", mixed, nil, codes.FailedPrecondition, "--allow-keks-with-credentials"},
	} {
		_, err := e.createIn(t, "crypt-refused", tc.kms, tc.sec, tc.src)
		wantCode(t, err, tc.code, tc.name)
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: the message does not say %q: %v", tc.name, tc.says, err)
		}
	}
	if after := e.c.Images(t); len(after) != len(before) {
		t.Errorf("refused creates left images: before %v, after %v", before, after)
	}
	for v, want := range map[string]int{enc.VolumeId: 1, plain.VolumeId: 1, copied.VolumeId: 0} {
		if names := snapNames(t, e.env, v); len(names) != want {
			t.Errorf("refused clones left snapshots on %s: %v", v, names)
		}
	}
	e.expectNoKeysLogged(t)
}

// A plugin without --kms-config refuses encrypted classes.
func TestCryptNeedsKMSConfig(t *testing.T) {
	e := setup(t)
	sec := maps.Clone(e.c.Secrets())
	sec["encryptionKEK.a1"] = newKEK(t)
	_, err := e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: "crypt-nokms", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCap(),
		Parameters: e.c.Params("encrypted", "true", "encryptionKMSID", "tenant-a"), Secrets: sec,
	})
	wantCode(t, err, codes.InvalidArgument, "an encrypted class without --kms-config")
	if !strings.Contains(err.Error(), "--kms-config") {
		t.Errorf("the message does not name --kms-config: %v", err)
	}
}

// A crash between creating the image and writing its metadata: the retry
// replaces the unfinished image with one that holds a valid record.
func TestCryptCrashBeforeMetadata(t *testing.T) {
	e := setupCrypt(t, "--test-crash-at", "CreateImage:created")
	_, err := e.createIn(t, "crypt-crash", "tenant-a", e.secrets("a"), nil)
	if err == nil {
		t.Fatal("CreateVolume survived --test-crash-at CreateImage:created")
	}
	if imgs := e.c.Images(t); len(imgs) != 1 {
		t.Fatalf("the crash should leave one unfinished image: %v", imgs)
	}
	e.p.Stop() // reaps the crashed process
	e.p.Without("--test-crash-at")
	e.p.Start()
	v := e.mustCreateIn(t, "crypt-crash", "tenant-a", e.secrets("a"), nil)
	if key, _ := e.volumeKey(t, v.VolumeId); key.KMSID != "tenant-a" || key.State != kms.StatePrepared {
		t.Fatalf("record after the retry: %+v", key)
	}
	if imgs := e.c.Images(t); len(imgs) != 1 {
		t.Fatalf("images after the retry: %v", imgs)
	}
}

// rotationRecorder is the Upkeep of the in-process rotating controller.
type rotationRecorder struct {
	mu      sync.Mutex
	passes  []map[string]int
	errs    []error
	rewraps int
}

func (r *rotationRecorder) BackgroundTasks(string, int) {}
func (r *rotationRecorder) Swept(error)                 {}
func (r *rotationRecorder) Reclaimed(string)            {}
func (r *rotationRecorder) Fenced(error)                {}
func (r *rotationRecorder) Rewrapped(_ string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.rewraps++
	}
}
func (r *rotationRecorder) RotationPassed(pending map[string]int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes, r.errs = append(r.passes, maps.Clone(pending)), append(r.errs, err)
}

// KEK rotation on the real cluster, with no node: the admin adds KEK a2
// to the controller's Secret and makes it current; a controller with that
// Secret (in process, with the real backend: the plugin's flag for its
// Secret's KEKs is not wired yet) re-wraps the DEK of a volume and of a
// deleted volume's hidden image in the real image metadata. A restore then
// needs a2, and gets the same DEK.
func TestCryptKEKRotation(t *testing.T) {
	e := setupCrypt(t)
	v := e.mustCreateIn(t, "crypt-rot", "tenant-a", e.secrets("a"), nil)
	gone, err := e.createIn(t, "crypt-rot-gone", "tenant-a", e.secrets("a"), nil)
	harness.Must(t, err, "CreateVolume")
	snap, err := e.snapshot(t, "crypt-rot-snap", gone.VolumeId)
	harness.Must(t, err, "CreateSnapshot")
	t.Cleanup(func() { e.deleteSnapshot(t, snap.SnapshotId) })
	e.delete(t, gone.VolumeId)
	var hidden string
	for _, img := range e.c.Images(t) {
		if strings.HasPrefix(img, "csi-del-") {
			hidden = img
		}
	}
	if hidden == "" {
		t.Fatalf("the deleted volume with a snapshot left no hidden image: %v", e.c.Images(t))
	}
	hiddenID := "v1:" + e.c.ClusterID + ":" + e.c.Pool + ":" + hidden // volumeKey reads the image by ID
	// The hidden image keeps the binding of the volume it was.
	created := map[string]string{v.VolumeId: imageOf(t, v.VolumeId), hiddenID: imageOf(t, gone.VolumeId)}
	before := map[string]kms.VolumeKey{}
	deks := map[string][]byte{}
	for _, id := range []string{v.VolumeId, hiddenID} {
		before[id], deks[id] = e.volumeKeyAs(t, id, created[id])
	}

	kekA2 := newKEK(t)
	own := e.secrets("a")
	own["encryptionKEK.a2"], own["encryptionKEKCurrent"] = kekA2, "a2"
	clusters, err := cluster.LoadMap(e.c.ConfigFile)
	harness.Must(t, err, "cluster map")
	conns := ceph.NewConns(ceph.DefaultOptions())
	t.Cleanup(conns.Close)
	rec := &rotationRecorder{}
	ctrl := controller.New(controller.Options{
		Backend: ceph.NewBackend(conns, ceph.BackendOptions{}), Clusters: clusters, InstanceID: e.c.Instance,
		Credentials: &cluster.Credentials{ID: e.c.CSIUser, Key: e.c.CSIKey}, KMS: e.kms,
		KMSSecrets: func() (map[string]string, error) { return maps.Clone(own), nil }, KEKRotationInterval: 100 * time.Millisecond,
		Upkeep: rec,
	})
	waitFor(t, "a complete rotation pass", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := len(rec.passes)
		return n > 0 && rec.errs[n-1] == nil && rec.passes[n-1]["tenant-a"] == 0 && rec.rewraps >= 2
	})
	ctrl.Close()

	all := e.secrets("a", "b")
	all["encryptionKEK.a2"], all["encryptionKEKCurrent"] = kekA2, "a2"
	for _, id := range []string{v.VolumeId, hiddenID} {
		key, ok, err := kms.ReadVolumeKey(e.imageMeta(t, id))
		if err != nil || !ok {
			t.Fatalf("%s: no record after the rotation: %v", id, err)
		}
		keys, err := e.kms.Open(key.KMSID, all)
		harness.Must(t, err, "open KMS")
		dek, err := keys.Unwrap(harness.Ctx(t), key.DEK, e.binding(key.KMSID, created[id]))
		harness.Must(t, err, "unwrap %s after the rotation", id)
		if key.DEK.KEKID() != "a2" || key.State != before[id].State || key.KMSID != "tenant-a" || !bytes.Equal(dek, deks[id]) {
			t.Errorf("%s after the rotation: %+v (same DEK %v), was %+v", id, key, bytes.Equal(dek, deks[id]), before[id])
		}
	}

	// A provisioner Secret that still holds only the old KEK no longer opens
	// the snapshot's DEK; one with the new KEK does, to the same DEK.
	_, err = e.createIn(t, "crypt-rot-restore", "tenant-a", e.secrets("a"), fromSnapshot(snap.SnapshotId))
	wantCode(t, err, codes.FailedPrecondition, "a restore with only the old KEK")
	if !strings.Contains(err.Error(), "encryptionKEK.a2") {
		t.Errorf("the refusal does not name the KEK it needs: %v", err)
	}
	withNew := e.secrets("a")
	withNew["encryptionKEK.a2"], withNew["encryptionKEKCurrent"] = kekA2, "a2"
	restore := e.mustCreateIn(t, "crypt-rot-restore", "tenant-a", withNew, fromSnapshot(snap.SnapshotId))
	key, ok, err := kms.ReadVolumeKey(e.imageMeta(t, restore.VolumeId))
	if err != nil || !ok || key.DEK.KEKID() != "a2" {
		t.Fatalf("the restore's record: %+v, %v", key, err)
	}
	keys, err := e.kms.Open("tenant-a", all)
	harness.Must(t, err, "open KMS")
	dek, err := keys.Unwrap(harness.Ctx(t), key.DEK, e.binding("tenant-a", imageOf(t, restore.VolumeId)))
	if err != nil || !bytes.Equal(dek, deks[hiddenID]) {
		t.Fatalf("the restore after the rotation has another DEK (%v)", err)
	}
	if strings.Contains(e.p.Logs(), kekA2) {
		t.Error("the new KEK is in the plugin log")
	}
}
