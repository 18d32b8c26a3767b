package controller_test

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmip/kmiptest"
)

// KEKs in a real KMIP server (PyKMIP). CreateVolume wraps through the
// server; the admin creates a key and names it keyID, and the controller's
// rotation pass re-wraps every DEK through the server with the
// credentials of its own Secret, keeping each DEK. With the server down, a
// pass leaves the KMS's volumes for the next one after the first failure
// (instead of waiting for the server once per volume), and CreateVolume,
// a restore included, is Unavailable.
func TestKEKRotationKMIP(t *testing.T) {
	srv := kmiptest.Start(t)
	k1, k2 := srv.NewKEK(t), srv.NewKEK(t)
	creds := map[string]string{"kmipCA": string(srv.PKI.CA), "kmipClientCert": string(srv.ClientCert), "kmipClientKey": string(srv.ClientKey)}
	withCreds := maps.Clone(creds)
	config := func(keyID string) kms.Config {
		return kms.Config{"hsm": {Type: kms.TypeKMIP, Endpoint: srv.Endpoint, KeyID: keyID}}
	}
	e := newEnv(t)
	// dekOf reads a volume's key record and unwraps its DEK through the
	// server.
	dekOf := func(t *testing.T, image string) (kms.VolumeKey, []byte) {
		t.Helper()
		info, err := e.ceph.Stat(ctx(t), e.pool, image)
		must(t, err, "Stat "+image)
		key, ok, err := kms.ReadVolumeKey(info.Metadata)
		if err != nil || !ok {
			t.Fatalf("image %s: no valid key record (%v): %v", image, ok, err)
		}
		keys, err := config(k1).Open("hsm", creds)
		must(t, err, "Open")
		dek, err := keys.Unwrap(ctx(t), key.DEK, e.binding("hsm", image, info.Metadata))
		must(t, err, "Unwrap "+image)
		return key, dek
	}

	c := e.start("", controller.Options{KMS: config(k1), Credentials: ownCreds()})
	var images, ids []string
	deks := map[string][]byte{}
	for _, name := range []string{"kmip-1", "kmip-2", "kmip-3"} {
		v := c.mustCreateIn(t, name, "hsm", withCreds, nil)
		img := imageOf(t, v.VolumeId)
		images, ids = append(images, img), append(ids, v.VolumeId)
		key, dek := dekOf(t, img)
		if key.DEK.KEKID() != k1 || !strings.HasPrefix(string(key.DEK), "k1.") {
			t.Fatalf("%s: wrapped %q, want a KMIP wrap by key %s", name, key.DEK, k1)
		}
		deks[img] = dek
	}

	// keyID k2: the pass re-wraps all three through the server.
	up := &rotUpkeep{rewraps: map[string]int{}}
	own := &controllerSecrets{m: creds}
	e.start("", controller.Options{KMS: config(k2), Credentials: ownCreds(), KMSSecrets: own.get,
		KEKRotationInterval: 20 * time.Millisecond, Upkeep: up})
	pass := up.waitPasses(t, 2)
	if pass.pending["hsm"] != 0 || pass.err != nil {
		t.Fatalf("after the passes: pending %v, %v", pass.pending, pass.err)
	}
	for _, img := range images {
		if key, dek := dekOf(t, img); key.DEK.KEKID() != k2 || !bytes.Equal(dek, deks[img]) {
			t.Errorf("%s after the rotation: %+v (same DEK %v)", img, key, bytes.Equal(dek, deks[img]))
		}
	}
	if got := up.count("hsm/ok"); got != 3 {
		t.Errorf("%d re-wraps reported, want 3", got)
	}

	snap := c.mustSnapshot(t, "kmip-snap", ids[0])

	// The server goes down, and keyID goes back to k1.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	down := &rotUpkeep{rewraps: map[string]int{}}
	c = e.start("", controller.Options{KMS: config(k1), Credentials: ownCreds(), KMSSecrets: own.get,
		KEKRotationInterval: 20 * time.Millisecond, Upkeep: down})
	pass = down.waitPasses(t, 2)
	if pass.pending["hsm"] != 3 || pass.err == nil || !strings.Contains(pass.err.Error(), "unavailable") {
		t.Errorf("a pass with the KMS down: pending %v, %v; want 3 pending and the outage named", pass.pending, pass.err)
	}
	down.mu.Lock()
	failures, passes := down.rewraps["hsm/error"], len(down.passes)
	down.mu.Unlock()
	if failures > passes+1 {
		t.Errorf("%d failed re-wraps in %d passes: the pass tried each volume of a KMS that is down", failures, passes)
	}
	_, err := c.createIn(t, "kmip-down", "hsm", withCreds, nil)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("CreateVolume with the KMS down: %v; want Unavailable", err)
	}
	_, err = c.createIn(t, "kmip-restore", "hsm", withCreds, fromSnapshot(snap))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a restore with the KMS down: %v; want Unavailable", err)
	}
	for _, img := range images {
		info, err := e.ceph.Stat(ctx(t), e.pool, img)
		must(t, err, "Stat")
		if k, _, _ := kms.ReadVolumeKey(info.Metadata); k.DEK.KEKID() != k2 {
			t.Errorf("%s changed while the KMS was down: %+v", img, k)
		}
	}
	c.deleteSnapshot(t, snap)
	for _, id := range ids {
		c.delete(t, id)
	}
	e.expectEmpty(t)
}
