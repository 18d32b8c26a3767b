package controller_test

import (
	"bytes"
	"encoding/base64"
	"maps"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// The KMS configuration of these tests: tenant-a's KEKs under the default
// prefix, tenant-b's under kekB.
var testKMS = kms.Config{"tenant-a": {Type: kms.TypeSecret}, "tenant-b": {Type: kms.TypeSecret, KeyPrefix: "kekB"}}

// KEK values: what must show up in no error and no log.
var (
	kekA = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa1}, 32))
	kekB = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xb2}, 32))
)

// cryptOpts is a controller with the test KMS configuration and a Ceph
// user of its own: encrypted classes name only a KEK Secret.
func cryptOpts() controller.Options { return controller.Options{KMS: testKMS, Credentials: ownCreds()} }

// withKEKs is a KEK Secret with the KEKs of the named tenants ("a", "b"),
// and no Ceph user.
func withKEKs(tenants ...string) map[string]string {
	s := map[string]string{}
	for _, t := range tenants {
		switch t {
		case "a":
			s["encryptionKEK.a1"] = kekA
		case "b":
			s["kekB.b1"] = kekB
		}
	}
	return s
}

// classParams are the parameters of a class encrypted with kmsID ("" plain).
func classParams(kmsID string) map[string]string {
	p := map[string]string{"clusterID": clusterID, "pool": poolName}
	if kmsID != "" {
		p["encrypted"], p["encryptionKMSID"] = "true", kmsID
	}
	return p
}

// createIn is CreateVolume of 8 MiB in a class encrypted with kmsID ("" plain).
func (c *ctrl) createIn(t *testing.T, name, kmsID string, sec map[string]string, src *csi.VolumeContentSource) (*csi.Volume, error) {
	resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
		Parameters: classParams(kmsID), Secrets: sec, VolumeContentSource: src,
	})
	if err != nil {
		noKeyIn(t, err.Error(), "the error of CreateVolume "+name)
		return nil, err
	}
	return resp.Volume, nil
}

func (c *ctrl) mustCreateIn(t *testing.T, name, kmsID string, sec map[string]string, src *csi.VolumeContentSource) *csi.Volume {
	t.Helper()
	v, err := c.createIn(t, name, kmsID, sec, src)
	must(t, err, "CreateVolume "+name)
	return v
}

// noKeyIn fails if s shows a KEK.
func noKeyIn(t *testing.T, s, where string) {
	t.Helper()
	for _, k := range []string{kekA, kekB} {
		if strings.Contains(s, k) {
			t.Errorf("%s shows a KEK: %s", where, s)
		}
	}
}

// volumeKey reads a volume's key record and its DEK, unwrapped with the
// KEKs of both tenants.
func (e *env) volumeKey(t *testing.T, volumeID string) (kms.VolumeKey, []byte) {
	t.Helper()
	info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, volumeID))
	must(t, err, "Stat")
	key, ok, err := kms.ReadVolumeKey(info.Metadata)
	if err != nil || !ok {
		t.Fatalf("volume %s has no valid key record (ok %v, %v): %v", volumeID, ok, err, info.Metadata)
	}
	keys, err := testKMS.Open(key.KMSID, withKEKs("a", "b"))
	must(t, err, "Open "+key.KMSID)
	dek, err := keys.Unwrap(ctx(t), key.DEK, e.binding(key.KMSID, imageOf(t, volumeID), info.Metadata))
	must(t, err, "Unwrap the DEK of "+volumeID)
	return key, dek
}

// binding is what the DEK of image (with metadata md) is bound to: the
// image its volume was created as, also once it is hidden.
func (e *env) binding(kmsID, image string, md map[string]string) kms.Binding {
	n := records.NewNames("", nil)
	return kms.Binding{KMSID: kmsID, Pool: e.pool.Name, Namespace: e.pool.Namespace, Image: n.OriginalImage(n.Volume(image, md))}
}

func (e *env) setMeta(t *testing.T, volumeID string, kv map[string]string) {
	t.Helper()
	must(t, e.ceph.SetMetadata(ctx(t), e.pool, imageOf(t, volumeID), kv), "SetMetadata")
}

// An encrypted CreateVolume stores a DEK wrapped by the class's KMS, state
// prepared, and says so in the volume context. A retry returns the same
// volume and key, even without the KEK; a retry that asks for other
// encryption is AlreadyExists.
func TestEncryptedCreate(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	v := c.mustCreateIn(t, "enc", "tenant-a", withKEKs("a"), nil)
	if vc := v.VolumeContext; vc["encrypted"] != "true" || vc["encryptionKMSID"] != "tenant-a" {
		t.Fatalf("volume context %v lacks the encryption", vc)
	}
	key, dek := e.volumeKey(t, v.VolumeId)
	if key.KMSID != "tenant-a" || key.State != kms.StatePrepared || key.DEK.KEKID() != "a1" || len(dek) != kms.DEKSize {
		t.Fatalf("key record %+v (DEK of %d bytes)", key, len(dek))
	}
	info, _ := e.ceph.Stat(ctx(t), e.pool, imageOf(t, v.VolumeId))
	noKeyIn(t, strings.Join(slicesOf(info.Metadata), " "), "the image metadata")

	for _, sec := range []map[string]string{withKEKs("a"), secrets()} {
		again := c.mustCreateIn(t, "enc", "tenant-a", sec, nil)
		if again.VolumeId != v.VolumeId {
			t.Fatalf("retry returned %s, first %s", again.VolumeId, v.VolumeId)
		}
		if k, _ := e.volumeKey(t, v.VolumeId); k != key {
			t.Fatalf("a retry rewrote the key record: %+v, first %+v", k, key)
		}
	}
	_, err := c.createIn(t, "enc", "", secrets(), nil)
	wantCode(t, err, codes.AlreadyExists, "the same name without encryption")
	_, err = c.createIn(t, "enc", "tenant-b", withKEKs("a", "b"), nil)
	wantCode(t, err, codes.AlreadyExists, "the same name with another KMS")

	plain := c.mustCreateIn(t, "plain", "", secrets(), nil)
	if _, ok := plain.VolumeContext["encrypted"]; ok {
		t.Fatalf("a plain volume's context says encrypted: %v", plain.VolumeContext)
	}
	_, err = c.createIn(t, "plain", "tenant-a", withKEKs("a"), nil)
	wantCode(t, err, codes.AlreadyExists, "an encrypted request for a plain volume's name")

	c.delete(t, v.VolumeId)
	c.delete(t, plain.VolumeId)
	e.expectEmpty(t)
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// What cannot be served is refused before anything is made, with a code
// and a message that say what to fix, and no key material.
func TestEncryptedCreateRefusals(t *testing.T) {
	e := newEnv(t)
	noKMS := e.start("", controller.Options{})
	_, err := noKMS.createIn(t, "refused", "tenant-a", withKEKs("a"), nil)
	wantCode(t, err, codes.InvalidArgument, "no KMS configuration")
	if !strings.Contains(err.Error(), "--kms-config") {
		t.Errorf("no KMS configuration: %v", err)
	}

	c := e.start("", cryptOpts())
	_, err = c.createIn(t, "refused", "tenant-z", withKEKs("a"), nil)
	wantCode(t, err, codes.InvalidArgument, "unknown KMS")
	if !strings.Contains(err.Error(), "tenant-z") {
		t.Errorf("unknown KMS: %v", err)
	}
	_, err = c.createIn(t, "refused", "tenant-a", withKEKs("b"), nil)
	wantCode(t, err, codes.FailedPrecondition, "no KEK of the class's KMS")
	if msg := err.Error(); !strings.Contains(msg, "tenant-a") || !strings.Contains(msg, "encryptionKEK.") {
		t.Errorf("no KEK: the message names neither the KMS nor the key: %v", err)
	}
	two := withKEKs("a")
	two["encryptionKEK.a2"] = kekB
	_, err = c.createIn(t, "refused", "tenant-a", two, nil)
	wantCode(t, err, codes.FailedPrecondition, "two KEKs and no Current")
	bad := withKEKs()
	bad["encryptionKEK.a1"] = base64.StdEncoding.EncodeToString([]byte("short"))
	_, err = c.createIn(t, "refused", "tenant-a", bad, nil)
	wantCode(t, err, codes.FailedPrecondition, "a short KEK")

	_, err = c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: "refused", VolumeCapabilities: blockCaps(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		Parameters: classParams("tenant-a"), Secrets: withKEKs("a"),
	})
	wantCode(t, err, codes.InvalidArgument, "encrypted multi-node writer")
	e.expectEmpty(t)
}

// A crash between creating the image and writing its metadata leaves an
// unfinished image; the retry replaces it with a finished one holding a
// valid record.
func TestEncryptedCreateAfterCrash(t *testing.T) {
	e := newEnv(t)
	healthy := e.start("", cryptOpts())
	src := healthy.mustCreateIn(t, "crash-src", "tenant-a", withKEKs("a"), nil)
	snap := healthy.mustSnapshot(t, "crash-snap", src.VolumeId)
	_, srcDEK := e.volumeKey(t, src.VolumeId)

	for _, tc := range []struct {
		point string
		from  *csi.VolumeContentSource
	}{
		{"CreateImage:created", nil},
		{"Clone:cloned", fromSnapshot(snap)},
	} {
		t.Run(tc.point, func(t *testing.T) {
			before := len(e.images())
			crashing := e.start(tc.point, cryptOpts())
			if died, err := crash(func() error {
				_, err := crashing.createIn(t, "crash-vol", "tenant-b", withKEKs("a", "b"), tc.from)
				return err
			}); !died {
				t.Fatalf("the call did not reach %s: %v", tc.point, err)
			}
			v := healthy.mustCreateIn(t, "crash-vol", "tenant-b", withKEKs("a", "b"), tc.from)
			if n := len(e.images()) - before; n != 1 {
				t.Fatalf("%d new images after crash and retry: %v", n, e.images())
			}
			key, dek := e.volumeKey(t, v.VolumeId)
			if key.KMSID != "tenant-b" || key.State != kms.StatePrepared {
				t.Fatalf("record after the retry: %+v", key)
			}
			if tc.from != nil && !bytes.Equal(dek, srcDEK) {
				t.Fatal("the restore's DEK is not its source's")
			}
			healthy.delete(t, v.VolumeId)
		})
	}
	healthy.deleteSnapshot(t, snap)
	healthy.delete(t, src.VolumeId)
	e.expectEmpty(t)
}

// An encrypted volume needs node expansion whatever its access type: the
// dm-crypt device shows the new size only after cryptsetup resize.
func TestEncryptedExpandNeedsTheNode(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	enc := c.mustCreateIn(t, "grow-enc", "tenant-a", withKEKs("a"), nil)
	plain := c.mustCreateIn(t, "grow-plain", "", secrets(), nil)
	for _, tc := range []struct {
		id   string
		size int64
		want bool
	}{{enc.VolumeId, 16 * mib, true}, {enc.VolumeId, 16 * mib, true}, {plain.VolumeId, 16 * mib, false}} {
		resp, err := c.c.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
			VolumeId: tc.id, CapacityRange: &csi.CapacityRange{RequiredBytes: tc.size}, Secrets: secrets(),
			VolumeCapability: blockCaps(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)[0],
		})
		must(t, err, "ControllerExpandVolume")
		if resp.NodeExpansionRequired != tc.want || resp.CapacityBytes != tc.size {
			t.Errorf("expand %s: %+v, want node expansion %v", tc.id, resp, tc.want)
		}
	}
	c.delete(t, enc.VolumeId)
	c.delete(t, plain.VolumeId)
	e.expectEmpty(t)
}

// A volume context must agree with the image's encryption: an encrypted
// image is never confirmed or attached with a context that lacks it (a
// static PV written without it), nor a plain one with a context that has it.
func TestVolumeContextMustMatchEncryption(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{KMS: testKMS, Nodes: oneNode{}, Credentials: ownCreds()})
	v := c.mustCreateIn(t, "ctx", "tenant-a", withKEKs("a"), nil)
	const static = "legacy-encrypted"
	info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, v.VolumeId))
	must(t, err, "Stat")
	record := map[string]string{}
	for _, k := range []string{kms.MetaKMS, kms.MetaDEK, kms.MetaState} {
		record[k] = info.Metadata[k]
	}
	must(t, e.ceph.CreateImage(ctx(t), e.pool, static, rbd.ImageSpec{Size: 8 * mib, Features: []string{"layering"}, Metadata: record}), "CreateImage")
	staticID := "v1:" + clusterID + ":" + poolName + ":" + static
	staticCtx := map[string]string{"clusterID": clusterID, "pool": poolName, "staticVolume": "true"}
	encCtx := maps.Clone(staticCtx)
	encCtx["encrypted"], encCtx["encryptionKMSID"] = "true", "tenant-a"
	otherKMS := maps.Clone(encCtx)
	otherKMS["encryptionKMSID"] = "tenant-b"

	for _, tc := range []struct {
		name   string
		id     string
		volCtx map[string]string
		ok     bool
	}{
		{"own volume, its context", v.VolumeId, v.VolumeContext, true},
		{"own volume, no context", v.VolumeId, nil, true},
		{"own volume, context without encryption", v.VolumeId, classParams(""), false},
		{"static, without encryption", staticID, staticCtx, false},
		{"static, another KMS", staticID, otherKMS, false},
		{"static, with encryption", staticID, encCtx, true},
	} {
		resp, err := c.c.ValidateVolumeCapabilities(ctx(t), &csi.ValidateVolumeCapabilitiesRequest{
			VolumeId: tc.id, VolumeContext: tc.volCtx, VolumeCapabilities: fsCaps(), Secrets: secrets(),
		})
		must(t, err, "ValidateVolumeCapabilities "+tc.name)
		if (resp.Confirmed != nil) != tc.ok {
			t.Errorf("validate %s: confirmed %v (%s), want %v", tc.name, resp.Confirmed != nil, resp.Message, tc.ok)
		}
		_, err = c.c.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
			VolumeId: tc.id, NodeId: "node-1", VolumeContext: tc.volCtx, VolumeCapability: fsCaps()[0], Secrets: secrets(),
		})
		if tc.ok {
			must(t, err, "publish "+tc.name)
			_, err = c.c.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: tc.id, NodeId: "node-1", Secrets: secrets()})
			must(t, err, "unpublish "+tc.name)
		} else {
			wantCode(t, err, codes.InvalidArgument, "publish "+tc.name)
		}
	}
	plain := c.mustCreateIn(t, "ctx-plain", "", secrets(), nil)
	withEnc := maps.Clone(plain.VolumeContext)
	withEnc["encrypted"], withEnc["encryptionKMSID"] = "true", "tenant-a"
	resp, err := c.c.ValidateVolumeCapabilities(ctx(t), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: plain.VolumeId, VolumeContext: withEnc, VolumeCapabilities: fsCaps(), Secrets: secrets(),
	})
	if err != nil || resp.Confirmed != nil {
		t.Errorf("a plain volume confirmed with an encrypted context: %v, %v", resp, err)
	}
	resp, err = c.c.ValidateVolumeCapabilities(ctx(t), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: v.VolumeId, Parameters: classParams(""), VolumeCapabilities: fsCaps(), Secrets: secrets(),
	})
	if err != nil || resp.Confirmed != nil {
		t.Errorf("an encrypted volume confirmed for plain parameters: %v, %v", resp, err)
	}
	c.delete(t, v.VolumeId)
	c.delete(t, plain.VolumeId)
	must(t, e.ceph.RemoveImage(ctx(t), e.pool, static), "RemoveImage")
	e.expectEmpty(t)
}
