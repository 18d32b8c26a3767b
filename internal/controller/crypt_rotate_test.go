package controller_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// rotUpkeep records what the KEK rotation reports.
type rotUpkeep struct {
	upkeep
	mu      sync.Mutex
	rewraps map[string]int // kms/result
	passes  []rotPass
}

type rotPass struct {
	pending map[string]int
	err     error
}

func (u *rotUpkeep) Rewrapped(kmsID string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	result := "ok"
	if err != nil {
		result = "error"
	}
	u.rewraps[kmsID+"/"+result]++
}

func (u *rotUpkeep) RotationPassed(pending map[string]int, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.passes = append(u.passes, rotPass{maps.Clone(pending), err})
}

// waitPasses waits for n more passes than have been seen, and returns the last.
func (u *rotUpkeep) waitPasses(t *testing.T, n int) rotPass {
	t.Helper()
	u.mu.Lock()
	want := len(u.passes) + n
	u.mu.Unlock()
	var last rotPass
	waitFor(t, "KEK rotation passes", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.passes) >= want {
			last = u.passes[len(u.passes)-1]
			return true
		}
		return false
	})
	return last
}

func (u *rotUpkeep) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rewraps[key]
}

// controllerSecrets is the controller's own Secret, which the admin edits.
type controllerSecrets struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *controllerSecrets) get() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m), nil
}

func (s *controllerSecrets) set(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = v
}

// record reads the key record of an image and its DEK, unwrapped with
// every KEK of these tests.
func (e *env) record(t *testing.T, image string, keks map[string]string) (kms.VolumeKey, []byte) {
	t.Helper()
	info, err := e.ceph.Stat(ctx(t), e.pool, image)
	must(t, err, "Stat "+image)
	key, ok, err := kms.ReadVolumeKey(info.Metadata)
	if err != nil || !ok {
		t.Fatalf("image %s has no valid key record (ok %v): %v", image, ok, err)
	}
	keys, err := testKMS.Open(key.KMSID, keks)
	must(t, err, "Open")
	dek, err := keys.Unwrap(ctx(t), key.DEK, e.binding(key.KMSID, image, info.Metadata))
	must(t, err, "Unwrap "+image)
	return key, dek
}

// A KEK rotation: the admin adds a new KEK to the controller's Secret and
// makes it current. The pass re-wraps every DEK of that KMS to it, the
// hidden image of a deleted volume's included, and changes nothing else
// (same DEK, same state). A DEK wrapped by a KEK the Secret lacks keeps
// its wrapping and is reported, as a KMS whose KEKs the Secret lacks; once
// the Secret holds the missing KEK, the next pass completes the rotation.
func TestKEKRotation(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	kekA2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa2}, 32))
	kekA0 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa0}, 32))
	all := withKEKs("a", "b")
	all["encryptionKEK.a2"], all["encryptionKEK.a0"], all["encryptionKEKCurrent"] = kekA2, kekA0, "a2"

	v1 := c.mustCreateIn(t, "rot-1", "tenant-a", withKEKs("a"), nil)
	v2 := c.mustCreateIn(t, "rot-2", "tenant-a", withKEKs("a"), nil)
	e.setMeta(t, v2.VolumeId, map[string]string{kms.MetaState: string(kms.StateFormatted)})
	src := c.mustCreateIn(t, "rot-src", "tenant-a", withKEKs("a"), nil)
	snap := c.mustSnapshot(t, "rot-snap", src.VolumeId)
	c.delete(t, src.VolumeId)
	hidden := e.hidden()
	if len(hidden) != 1 {
		t.Fatalf("hidden images: %v", hidden)
	}
	a0 := withKEKs()
	a0["encryptionKEK.a0"] = kekA0
	stuck := c.mustCreateIn(t, "rot-stuck", "tenant-a", a0, nil)
	vb := c.mustCreateIn(t, "rot-b", "tenant-b", withKEKs("b"), nil)
	plain := c.mustCreateIn(t, "rot-plain", "", secrets(), nil)

	images := map[string]string{"rot-1": imageOf(t, v1.VolumeId), "rot-2": imageOf(t, v2.VolumeId), "hidden": hidden[0],
		"stuck": imageOf(t, stuck.VolumeId), "rot-b": imageOf(t, vb.VolumeId)}
	before := map[string]kms.VolumeKey{}
	deks := map[string][]byte{}
	for n, img := range images {
		before[n], deks[n] = e.record(t, img, all)
	}

	own := &controllerSecrets{m: withKEKs("a")}
	own.set("encryptionKEK.a2", kekA2)
	own.set("encryptionKEKCurrent", "a2")
	up := &rotUpkeep{rewraps: map[string]int{}}
	e.start("", controller.Options{KMS: testKMS, Credentials: ownCreds(), KMSSecrets: own.get,
		KEKRotationInterval: 20 * time.Millisecond, Upkeep: up})
	pass := up.waitPasses(t, 2)
	if pass.pending["tenant-a"] != 1 || pass.pending["tenant-b"] != 1 {
		t.Fatalf("pending after the passes: %v, want tenant-a 1 (stuck), tenant-b 1", pass.pending)
	}
	if msg := pass.err.Error(); !strings.Contains(msg, "tenant-b") || !strings.Contains(msg, "could not be re-wrapped") {
		t.Errorf("the pass's error does not name what failed: %v", pass.err)
	}
	noKeyIn(t, pass.err.Error(), "the pass's error")
	for _, k := range []string{kekA0, kekA2} {
		if strings.Contains(pass.err.Error(), k) {
			t.Errorf("the pass's error shows a KEK")
		}
	}
	for n, img := range images {
		key, dek := e.record(t, img, all)
		switch n {
		case "stuck", "rot-b":
			if key != before[n] {
				t.Errorf("%s changed although its re-wrap could not be done: %+v, was %+v", n, key, before[n])
			}
		default:
			if key.DEK.KEKID() != "a2" || key.KMSID != before[n].KMSID || key.State != before[n].State || !bytes.Equal(dek, deks[n]) {
				t.Errorf("%s after the rotation: %+v (same DEK %v), was %+v", n, key, bytes.Equal(dek, deks[n]), before[n])
			}
		}
	}
	if got := up.count("tenant-a/ok"); got != 3 {
		t.Errorf("%d re-wraps reported, want 3", got)
	}
	if up.count("tenant-a/error") == 0 {
		t.Error("the failed re-wrap was not reported")
	}
	info, _ := e.ceph.Stat(ctx(t), e.pool, imageOf(t, plain.VolumeId))
	if _, ok, _ := kms.ReadVolumeKey(info.Metadata); ok {
		t.Error("a plain volume got a key record")
	}
	restored := c.mustCreateIn(t, "rot-restore", "tenant-a", all, fromSnapshot(snap))
	if _, dek := e.record(t, imageOf(t, restored.VolumeId), all); !bytes.Equal(dek, deks["hidden"]) {
		t.Error("a restore after the rotation has another DEK")
	}

	// The admin adds the missing old KEK: the next pass completes tenant-a.
	own.set("encryptionKEK.a0", kekA0)
	pass = up.waitPasses(t, 2)
	if pass.pending["tenant-a"] != 0 {
		t.Fatalf("tenant-a still pending: %v (%v)", pass.pending, pass.err)
	}
	if key, dek := e.record(t, images["stuck"], all); key.DEK.KEKID() != "a2" || !bytes.Equal(dek, deks["stuck"]) {
		t.Errorf("stuck after its KEK came: %+v", key)
	}

	for _, id := range []string{v1.VolumeId, v2.VolumeId, stuck.VolumeId, vb.VolumeId, plain.VolumeId, restored.VolumeId} {
		c.delete(t, id)
	}
	c.deleteSnapshot(t, snap)
	waitFor(t, "the hidden source goes with its snapshot", func() bool { return len(e.hidden()) == 0 })
	e.expectEmpty(t)
}

// No rotation without the controller's own secrets or credentials, and a
// pass that cannot read the secrets reports it and changes nothing.
func TestKEKRotationNeedsOwnSecrets(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	v := c.mustCreateIn(t, "norot", "tenant-a", withKEKs("a"), nil)
	before, _ := e.volumeKey(t, v.VolumeId)
	up := &rotUpkeep{rewraps: map[string]int{}}
	e.start("", controller.Options{KMS: testKMS, KMSSecrets: (&controllerSecrets{m: withKEKs("a")}).get, KEKRotationInterval: 5 * time.Millisecond, Upkeep: up})
	time.Sleep(50 * time.Millisecond)
	up.mu.Lock()
	ran := len(up.passes)
	up.mu.Unlock()
	if ran != 0 {
		t.Fatal("a controller without credentials of its own ran rotation passes")
	}
	failing := func() (map[string]string, error) { return nil, errSecrets }
	e.start("", controller.Options{KMS: testKMS, Credentials: ownCreds(), KMSSecrets: failing, KEKRotationInterval: 5 * time.Millisecond, Upkeep: up})
	if pass := up.waitPasses(t, 1); pass.err == nil || pass.pending != nil {
		t.Fatalf("a pass without secrets: %+v", pass)
	}
	if after, _ := e.volumeKey(t, v.VolumeId); after != before {
		t.Fatal("a pass without secrets changed a record")
	}
	c.delete(t, v.VolumeId)
	e.expectEmpty(t)
}

var errSecrets = errorString("secret directory: permission denied")

type errorString string

func (e errorString) Error() string { return string(e) }

// statHook runs hook before each Stat of the backend it wraps.
type statHook struct {
	rbd.Backend
	hook func(name string)
}

func (s statHook) Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error) {
	s.hook(name)
	return s.Backend.Stat(ctx, p, name)
}

// A rotation pass that reads a volume whose DEK is current does so
// without the volume's lock: a request on the volume at that moment (a
// clone of it) is served, not refused with Aborted. (The pass ran every 10 minutes in
// production and every second in the node suite, where clones of an
// encrypted volume failed when they met it.)
func TestKEKRotationPassLeavesCurrentVolumesUnlocked(t *testing.T) {
	e := newEnv(t)
	var (
		armed   atomic.Bool
		image   string
		vol     *csi.Volume
		cloneID string
		c       *ctrl
	)
	served := make(chan error, 1)
	e.wrap = func(b rbd.Backend) rbd.Backend {
		return statHook{Backend: b, hook: func(name string) {
			if !armed.Load() || name != image || !armed.CompareAndSwap(true, false) {
				return
			}
			// A clone locks its source's image, as the pass did.
			clone, err := c.createIn(t, "rot-clone", "tenant-a", withKEKs("a"), fromVolume(vol.VolumeId))
			if err == nil {
				cloneID = clone.VolumeId
			}
			served <- err
		}}
	}
	own := &controllerSecrets{m: withKEKs("a")}
	own.set("encryptionKEKCurrent", "a1")
	c = e.start("", controller.Options{KMS: testKMS, Credentials: ownCreds(), KMSSecrets: own.get,
		KEKRotationInterval: 20 * time.Millisecond, Upkeep: &rotUpkeep{rewraps: map[string]int{}}})
	vol = c.mustCreateIn(t, "rot-busy", "tenant-a", withKEKs("a"), nil)
	image = imageOf(t, vol.VolumeId)
	armed.Store(true)
	select {
	case err := <-served:
		must(t, err, "a clone of the volume while a rotation pass reads it")
	case <-time.After(5 * time.Second):
		t.Fatal("no rotation pass read the volume within 5 s")
	}
	c.delete(t, cloneID)
	c.delete(t, vol.VolumeId)
}

// legacyDEK is a key record as releases before the binding wrote it: the
// DEK 0x07 x 32 wrapped by kekA (ID a1), bound to no image.
const legacyDEK = "v1.a1.AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM.BAQEBAQEBAQEBAQE.JRCY2Pf8wBHfZzXcH42luxmdcZhesY7OiwpiYEL5Kc6yeR8gsXQKZ9nxkynyedU1"

// A legacy wrap is re-wrapped by the next pass although its KEK is the
// current one: afterwards it is bound to its image, and holds the same DEK.
func TestKEKRotationBindsLegacyWraps(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	v := c.mustCreateIn(t, "legacy", "tenant-a", withKEKs("a"), nil)
	e.setMeta(t, v.VolumeId, map[string]string{kms.MetaDEK: legacyDEK})

	up := &rotUpkeep{rewraps: map[string]int{}}
	own := &controllerSecrets{m: withKEKs("a")}
	e.start("", controller.Options{KMS: testKMS, Credentials: ownCreds(), KMSSecrets: own.get,
		KEKRotationInterval: 20 * time.Millisecond, Upkeep: up})
	if pass := up.waitPasses(t, 2); pass.pending["tenant-a"] != 0 || pass.err != nil {
		t.Fatalf("after the passes: pending %v, %v", pass.pending, pass.err)
	}
	key, dek := e.volumeKey(t, v.VolumeId)
	if !key.DEK.Bound() || key.DEK.KEKID() != "a1" || !bytes.Equal(dek, bytes.Repeat([]byte{7}, 32)) {
		t.Errorf("after the rotation: %+v (bound %v), DEK %x", key, key.DEK.Bound(), dek)
	}
	if up.count("tenant-a/ok") != 1 {
		t.Errorf("%d re-wraps reported, want 1", up.count("tenant-a/ok"))
	}
	c.delete(t, v.VolumeId)
	e.expectEmpty(t)
}
