package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// fakeCrypt keeps LUKS headers and open devices in memory.
type fakeCrypt struct {
	mu      sync.Mutex
	headers map[string][]byte // device -> the key its header opens with
	// jsons is a header's JSON metadata (device -> JSON); a header without
	// one is what Format writes (goodHeader).
	jsons     map[string][]byte
	activeErr error             // what CheckActive says
	open      map[string]string // name -> device
	calls     []string
}

// goodHeader is the JSON metadata of a header luks.Format wrote.
var goodHeader = func() []byte {
	js, err := os.ReadFile("../luks/testdata/formatted.json")
	if err != nil {
		panic(err)
	}
	return js
}()

func (c *fakeCrypt) log(call string) { c.calls = append(c.calls, call) }

func (c *fakeCrypt) Format(_ context.Context, device string, key []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log("format " + device)
	c.headers[device] = bytes.Clone(key)
	return nil
}

func (c *fakeCrypt) Header(_ context.Context, device string) (luks.Header, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log("header " + device)
	if _, ok := c.headers[device]; !ok {
		return luks.Header{}, errors.New("not a LUKS device")
	}
	js, ok := c.jsons[device]
	if !ok {
		js = goodHeader
	}
	return luks.ParseHeader(js)
}

func (c *fakeCrypt) CheckActive(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log("check " + name)
	return c.activeErr
}

func (c *fakeCrypt) IsLUKS(_ context.Context, device string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.headers[device]
	return ok, nil
}

func (c *fakeCrypt) Open(_ context.Context, device, name string, key []byte, _ luks.OpenOptions) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log("open " + name)
	if !bytes.Equal(c.headers[device], key) {
		return "", luks.ErrWrongKey
	}
	c.open[name] = device
	return "/dev/mapper/" + name, nil
}

func (c *fakeCrypt) Close(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log("close " + name)
	delete(c.open, name)
	return nil
}

func (c *fakeCrypt) Resize(context.Context, string) error { return nil }

func (c *fakeCrypt) Active(context.Context) ([]luks.Mapping, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []luks.Mapping
	for name, dev := range c.open {
		out = append(out, luks.Mapping{Name: name, Backing: dev})
	}
	return out, nil
}

// fakeImages is one image's metadata.
type fakeImages struct {
	mu    sync.Mutex
	md    map[string]string
	onSet func(kv map[string]string) // if set, sees every SetMetadata
}

func (f *fakeImages) Stat(context.Context, rbd.Pool, string) (rbd.ImageInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return rbd.ImageInfo{Metadata: maps.Clone(f.md)}, nil
}

func (f *fakeImages) SetMetadata(_ context.Context, _ rbd.Pool, _ string, kv map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.onSet != nil {
		f.onSet(kv)
	}
	maps.Copy(f.md, kv)
	return nil
}

type cryptFixture struct {
	*fixture
	crypt  *fakeCrypt
	images *fakeImages
	dek    []byte
	kek    string // base64, as in the Secret
}

// newCryptFixture is a node with an encrypted volume in state prepared,
// its DEK wrapped by KEK k1 of KMS tenant-a.
func newCryptFixture(t *testing.T) *cryptFixture {
	t.Helper()
	f := &cryptFixture{fixture: newFixture(t), crypt: &fakeCrypt{headers: map[string][]byte{}, jsons: map[string][]byte{}, open: map[string]string{}}}
	kek := make([]byte, 32)
	_, _ = rand.Read(kek)
	f.kek = base64.StdEncoding.EncodeToString(kek)
	var err error
	if f.dek, err = kms.NewDEK(); err != nil {
		t.Fatal(err)
	}
	w, err := kms.Wrap("k1", kek, f.dek, cryptBinding)
	if err != nil {
		t.Fatal(err)
	}
	f.images = &fakeImages{md: kms.VolumeKey{KMSID: "tenant-a", DEK: w, State: kms.StatePrepared}.Metadata()}
	f.n.crypt, f.n.images, f.n.kms = f.crypt, f.images, kms.Config{"tenant-a": {Type: kms.TypeSecret}}
	// Encrypted classes name only their KEK Secret: the node maps as its
	// own user.
	f.n.cred = &cluster.Credentials{ID: "node-user", Key: testKey}
	f.run.blkid = blkidEmpty
	return f
}

func (f *cryptFixture) stageReq(c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	req := f.fixture.stageReq(c)
	req.VolumeContext["encrypted"] = "true"
	req.VolumeContext["encryptionKMSID"] = "tenant-a"
	req.Secrets = map[string]string{"encryptionKEK.k1": f.kek}
	return req
}

func (f *cryptFixture) state() string { return f.images.md[kms.MetaState] }

func TestEncryptedStageFormatsOnceOpensAndCloses(t *testing.T) {
	f := newCryptFixture(t)
	req := f.stageReq(fsCap(rwo))
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	name := luks.Name(volID)
	if !bytes.Equal(f.crypt.headers["/dev/fake0"], f.dek) {
		t.Fatal("the LUKS header was not made with the volume's DEK")
	}
	if f.state() != string(kms.StateFormatted) {
		t.Errorf("state %q after the first stage", f.state())
	}
	if mps, _ := f.mounter.List(); len(mps) != 1 || mps[0].Device != "/dev/mapper/"+name {
		t.Errorf("mounted %+v, want the dm-crypt device", mps)
	}
	if rec, _ := f.n.store.load(volID); rec == nil || rec.Crypt != name {
		t.Errorf("record %+v does not name the dm-crypt device", rec)
	}
	for _, v := range f.crypt.calls {
		if strings.Contains(v, string(f.dek)) {
			t.Error("the DEK reached a call's description")
		}
	}

	if _, err := f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: req.StagingTargetPath}); err != nil {
		t.Fatal(err)
	}
	if len(f.crypt.open) != 0 || len(f.m.mapped) != 0 {
		t.Fatalf("after unstage: open %v, mapped %v", f.crypt.open, f.m.mapped)
	}
	if i, j := slices.Index(f.crypt.calls, "close "+name), len(f.m.unmaps); i < 0 || j != 1 {
		t.Fatalf("calls %v, unmaps %d", f.crypt.calls, j)
	}

	// Staged again: opened, never formatted a second time. (The fake
	// mounter's mount outlives unstage: mountedFrom cannot stat a made-up
	// device, so it takes the mount for someone else's; the kernel-test
	// VM runs the real thing.)
	_ = f.mounter.Unmount(req.StagingTargetPath)
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if n := countPrefix(f.crypt.calls, "format "); n != 1 {
		t.Errorf("formatted %d times", n)
	}
}

func TestEncryptedStageCompletesAFormatACrashCutShort(t *testing.T) {
	f := newCryptFixture(t)
	f.crypt.headers["/dev/fake0"] = f.dek // formatted, state still prepared
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(blockCapOf(rwo))); err != nil {
		t.Fatal(err)
	}
	if countPrefix(f.crypt.calls, "format ") != 0 || f.state() != string(kms.StateFormatted) {
		t.Errorf("calls %v, state %q: want an open without a format, then state formatted", f.crypt.calls, f.state())
	}
}

func TestEncryptedStageNeverFormatsData(t *testing.T) {
	for name, c := range map[string]struct {
		setup func(f *cryptFixture)
		cap   *csi.VolumeCapability
	}{
		"formatted without a header":    {func(f *cryptFixture) { f.images.md[kms.MetaState] = string(kms.StateFormatted) }, fsCap(rwo)},
		"a filesystem on the device":    {func(f *cryptFixture) { f.run.blkid = blkidSays("TYPE=ext4") }, fsCap(rwo)},
		"read-only and never formatted": {func(*cryptFixture) {}, fsCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)},
	} {
		t.Run(name, func(t *testing.T) {
			f := newCryptFixture(t)
			c.setup(f)
			_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(c.cap))
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("stage: %v, want FailedPrecondition", err)
			}
			if countPrefix(f.crypt.calls, "format ") != 0 || len(f.crypt.open) != 0 || len(f.m.mapped) != 0 {
				t.Errorf("calls %v, open %v, mapped %v", f.crypt.calls, f.crypt.open, f.m.mapped)
			}
		})
	}
}

func TestEncryptedStageKeyRefusals(t *testing.T) {
	other := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	for name, c := range map[string]struct {
		change func(f *cryptFixture, req *csi.NodeStageVolumeRequest)
		code   codes.Code
		says   string
	}{
		"wrong KEK": {func(_ *cryptFixture, r *csi.NodeStageVolumeRequest) { r.Secrets["encryptionKEK.k1"] = other }, codes.PermissionDenied, "tenant-a"},
		"no KEK":    {func(_ *cryptFixture, r *csi.NodeStageVolumeRequest) { delete(r.Secrets, "encryptionKEK.k1") }, codes.FailedPrecondition, "encryptionKEK.k1"},
		"unknown KMS": {func(f *cryptFixture, _ *csi.NodeStageVolumeRequest) {
			f.n.kms = kms.Config{"other": {Type: kms.TypeSecret}}
		}, codes.FailedPrecondition, "tenant-a"},
		"no KMS config": {func(f *cryptFixture, _ *csi.NodeStageVolumeRequest) { f.n.kms = nil }, codes.FailedPrecondition, "--kms-config"},
		"plain image":   {func(f *cryptFixture, _ *csi.NodeStageVolumeRequest) { f.images.md = map[string]string{} }, codes.FailedPrecondition, "no key record"},
		"KEK beside a Ceph key": {func(_ *cryptFixture, r *csi.NodeStageVolumeRequest) {
			r.Secrets["userID"], r.Secrets["userKey"] = "csi-rbd", testKey
		}, codes.FailedPrecondition, "--allow-keks-with-credentials"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newCryptFixture(t)
			req := f.stageReq(fsCap(rwo))
			c.change(f, req)
			_, err := f.n.NodeStageVolume(context.Background(), req)
			if status.Code(err) != c.code || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("stage: %v, want %v saying %q", err, c.code, c.says)
			}
			if strings.Contains(err.Error(), f.kek) || strings.Contains(err.Error(), other) {
				t.Error("the error holds key material")
			}
			if len(f.m.maps) != 0 || len(f.crypt.calls) != 0 || f.state() != f.images.md[kms.MetaState] {
				t.Errorf("a refused stage mapped %v or ran %v", f.m.maps, f.crypt.calls)
			}
		})
	}
}

// A stage maps as the node's own user when the secrets hold only KEKs;
// with --allow-keks-with-credentials, a Secret that holds a Ceph key too
// stages as that user, its KEKs used.
func TestEncryptedStageUsers(t *testing.T) {
	f := newCryptFixture(t)
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo))); err != nil {
		t.Fatal(err)
	}
	if len(f.m.maps) != 1 || f.m.maps[0].Cred.ID != "node-user" {
		t.Fatalf("maps %v, want one as the node's own user", f.m.maps)
	}
	f = newCryptFixture(t)
	f.n.mixedKeys = true
	req := f.stageReq(fsCap(rwo))
	req.Secrets["userID"], req.Secrets["userKey"] = "csi-rbd", testKey
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatalf("stage with KEKs beside a Ceph key, allowed: %v", err)
	}
	if len(f.m.maps) != 1 || f.m.maps[0].Cred.ID != "csi-rbd" {
		t.Fatalf("maps %v, want one as the secret's user", f.m.maps)
	}
}

func TestCloseStaleCryptClosesOnlyUnrecordedDevicesOfOurs(t *testing.T) {
	f := newCryptFixture(t)
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo))); err != nil {
		t.Fatal(err)
	}
	stale := luks.Name("v1:c1:rbd:csi-vol-gone")
	f.crypt.open[stale] = "/dev/fake9"
	if err := f.n.CloseStaleCrypt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.crypt.open[stale]; ok {
		t.Error("a device no record names stayed open")
	}
	if _, ok := f.crypt.open[luks.Name(volID)]; !ok {
		t.Error("a staged volume's device was closed")
	}
}

func countPrefix(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func blkidSays(out string) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(out + "\n"), nil }
}

func blockCapOf(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}
