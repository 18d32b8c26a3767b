package controller_test

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
)

// oneNode is a node registry that knows node-1 and indexes nothing.
type oneNode struct{}

func (oneNode) Lookup(_ context.Context, id string) (nodereg.Node, bool, error) {
	return nodereg.Node{ID: id}, id == "node-1", nil
}
func (oneNode) Attachments(context.Context, string) ([]string, error)  { return nil, nil }
func (oneNode) AddAttachment(context.Context, string, string) error    { return nil }
func (oneNode) RemoveAttachment(context.Context, string, string) error { return nil }
func (oneNode) AddFence(context.Context, string, string, nodereg.Fence) error {
	return nil
}
func (oneNode) DropExpiredFences(context.Context) (int, error) { return 0, nil }
func (oneNode) ClientIP(context.Context, string, string) (netip.Addr, bool, error) {
	return netip.Addr{}, false, nil
}
func (oneNode) VolumeFences(context.Context) (map[string]map[string]nodereg.Fence, error) {
	return nil, nil
}

// Restores and clones of an encrypted volume share its LUKS header, so
// they carry the same DEK, wrapped for their own class's KMS, in state
// prepared whatever the source's. That holds for a restore into another
// KMS, a clone, and a restore whose source volume is deleted; a retry
// returns the same volume without wrapping again.
func TestEncryptedRestoreAndCloneRewrap(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	src := c.mustCreateIn(t, "src", "tenant-a", withKEKs("a"), nil)
	srcKey, srcDEK := e.volumeKey(t, src.VolumeId)
	// The node formatted the source.
	e.setMeta(t, src.VolumeId, map[string]string{kms.MetaState: string(kms.StateFormatted)})
	snap := c.mustSnapshot(t, "src-snap", src.VolumeId)

	both := withKEKs("a", "b")
	restore := c.mustCreateIn(t, "restore-b", "tenant-b", both, fromSnapshot(snap))
	clone := c.mustCreateIn(t, "clone-a", "tenant-a", withKEKs("a"), fromVolume(src.VolumeId))
	for _, tc := range []struct {
		id, kms, kek string
	}{{restore.VolumeId, "tenant-b", "b1"}, {clone.VolumeId, "tenant-a", "a1"}} {
		key, dek := e.volumeKey(t, tc.id)
		if key.KMSID != tc.kms || key.DEK.KEKID() != tc.kek || key.State != kms.StatePrepared {
			t.Errorf("child %s: record %+v, want KMS %s, KEK %s, state prepared", tc.id, key, tc.kms, tc.kek)
		}
		if !bytes.Equal(dek, srcDEK) {
			t.Errorf("child %s has another DEK than its source", tc.id)
		}
		if key.DEK == srcKey.DEK {
			t.Errorf("child %s holds its source's wrapped DEK, not a wrap of its own", tc.id)
		}
	}
	if snaps := e.userSnaps(t, imageOf(t, src.VolumeId)); len(snaps) != 1 {
		t.Errorf("the clone left snapshots on its source: %v", snaps)
	}
	before, _ := e.volumeKey(t, restore.VolumeId)
	again := c.mustCreateIn(t, "restore-b", "tenant-b", withKEKs(), fromSnapshot(snap))
	if after, _ := e.volumeKey(t, restore.VolumeId); again.VolumeId != restore.VolumeId || after != before {
		t.Fatalf("the retry returned %s with record %+v; first %s with %+v", again.VolumeId, after, restore.VolumeId, before)
	}
	_, err := c.createIn(t, "restore-b", "tenant-a", withKEKs("a"), fromSnapshot(snap))
	wantCode(t, err, codes.AlreadyExists, "the restore's name with another KMS")

	// The source deleted: its data, and key record, stay in a hidden
	// image for the snapshot.
	c.delete(t, src.VolumeId)
	late := c.mustCreateIn(t, "late", "tenant-a", withKEKs("a"), fromSnapshot(snap))
	if _, dek := e.volumeKey(t, late.VolumeId); !bytes.Equal(dek, srcDEK) {
		t.Error("a restore from a deleted volume's snapshot has another DEK")
	}

	for _, id := range []string{late.VolumeId, restore.VolumeId, clone.VolumeId} {
		c.delete(t, id)
	}
	c.deleteSnapshot(t, snap)
	e.expectEmpty(t)
}

// encrypted -> plain and plain -> encrypted are InvalidArgument, a source
// whose KEKs the secret lacks FailedPrecondition naming its KMS; none
// leaves an image or a temporary snapshot behind.
func TestEncryptedSourceRefusals(t *testing.T) {
	e := newEnv(t)
	c := e.start("", cryptOpts())
	enc := c.mustCreateIn(t, "enc-src", "tenant-a", withKEKs("a"), nil)
	plain := c.mustCreateIn(t, "plain-src", "", secrets(), nil)
	encSnap := c.mustSnapshot(t, "enc-snap", enc.VolumeId)
	plainSnap := c.mustSnapshot(t, "plain-snap", plain.VolumeId)
	images := len(e.images())

	for _, tc := range []struct {
		name, kms string
		sec       map[string]string
		from      string
		snap      bool
		code      codes.Code
		says      []string
	}{
		{"encrypted snapshot into a plain class", "", secrets(), encSnap, true, codes.InvalidArgument, []string{"encrypted", "tenant-a"}},
		{"encrypted volume into a plain class", "", secrets(), enc.VolumeId, false, codes.InvalidArgument, []string{"encrypted"}},
		{"plain snapshot into an encrypted class", "tenant-a", withKEKs("a"), plainSnap, true, codes.InvalidArgument, []string{"not encrypted"}},
		{"plain volume into an encrypted class", "tenant-b", withKEKs("b"), plain.VolumeId, false, codes.InvalidArgument, []string{"not encrypted"}},
		{"no KEK of the source's KMS", "tenant-b", withKEKs("b"), encSnap, true, codes.FailedPrecondition, []string{"tenant-a", "provisioner", "encryptionKEK.a1"}},
		{"no KEK of the source's KMS, volume", "tenant-b", withKEKs("b"), enc.VolumeId, false, codes.FailedPrecondition, []string{"tenant-a", "provisioner"}},
		{"no KEK of the new volume's KMS", "tenant-b", withKEKs("a"), encSnap, true, codes.FailedPrecondition, []string{"tenant-b", "kekB."}},
	} {
		src := fromVolume(tc.from)
		if tc.snap {
			src = fromSnapshot(tc.from)
		}
		_, err := c.createIn(t, "refused", tc.kms, tc.sec, src)
		wantCode(t, err, tc.code, tc.name)
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: the message does not say %q: %v", tc.name, s, err)
			}
		}
	}
	if n := len(e.images()); n != images {
		t.Errorf("refused creates left images: %v", e.images())
	}
	for _, v := range []string{enc.VolumeId, plain.VolumeId} {
		if snaps := e.userSnaps(t, imageOf(t, v)); len(snaps) != 1 {
			t.Errorf("refused clones left snapshots: %v", snaps)
		}
	}
	c.deleteSnapshot(t, encSnap)
	c.deleteSnapshot(t, plainSnap)
	c.delete(t, enc.VolumeId)
	c.delete(t, plain.VolumeId)
	e.expectEmpty(t)
}
