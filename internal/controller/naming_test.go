package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func TestImageName(t *testing.T) {
	n := newNaming("", []string{"k8s-prod-"})
	a, b := n.image(volumePrefix, "pvc-1"), n.image(volumePrefix, "pvc-2")
	if a == b || a != n.image(volumePrefix, "pvc-1") || !n.isVolumeImage(a) {
		t.Fatalf("image: %q %q", a, b)
	}
	// The default instance names images as the driver always has: existing
	// volumes keep being found.
	sum := sha256.Sum256([]byte("pvc-1"))
	if want := "csi-vol-" + hex.EncodeToString(sum[:10]); a != want {
		t.Fatalf("default image name %q, want %q", a, want)
	}
	prod := n.image("k8s-prod-", "pvc-1")
	if prod != "k8s-prod-"+a[len(volumePrefix):] || !n.isVolumeImage(prod) {
		t.Fatalf("image with a prefix: %q", prod)
	}
	for _, other := range []string{
		"csi-vol-x", "foo", "csi-del-" + a[len("csi-vol-"):],
		"csi-vol-0123456789ABCDEF0123",                 // not ours: upper case
		"csi-vol-0123456789abcdefg123",                 // not hex
		"csi-vol-4b8d7a1e-5f0c-11ee-8c99-0242ac120002", // another driver's UUID name
		"k8s-dev-" + a[len(volumePrefix):],             // a prefix the controller was not given
	} {
		if n.isVolumeImage(other) {
			t.Errorf("%q taken for a volume image", other)
		}
	}
	// The finished mark holds for the prefix the metadata records.
	meta := map[string]string{metaName: "pvc-1", metaNamePrefix: "k8s-prod-"}
	if !n.finished(meta, prod) || n.finished(meta, a) || !n.finished(map[string]string{metaName: "pvc-1"}, a) {
		t.Error("finished does not follow the recorded name prefix")
	}
}

// Instances sharing a pool never take each other's images, hidden images,
// snapshots or index objects for their own, whatever their IDs.
func TestInstanceNaming(t *testing.T) {
	instances := []naming{
		newNaming("", []string{"k8s-"}), newNaming("b", []string{"k8s-"}), newNaming("ab", []string{"k8s-"}),
		newNaming("a-b", []string{"k8s-"}), newNaming("0123456789abcdef", []string{"k8s-"}),
	}
	for i, n := range instances {
		vol, prefixed, hidden := n.image(volumePrefix, "pvc-1"), n.image("k8s-", "pvc-1"), n.hidden("10ab3c4d5e6f")
		if !n.isVolumeImage(vol) || !n.isVolumeImage(prefixed) || !n.finished(map[string]string{metaName: "pvc-1"}, vol) {
			t.Errorf("instance %q does not know its own volume %q", n.instance, vol)
		}
		if id, ok := n.hiddenID(hidden); !ok || id != "10ab3c4d5e6f" {
			t.Errorf("instance %q: hidden %q gives %q, %v", n.instance, hidden, id, ok)
		}
		for j, m := range instances {
			if i == j {
				continue
			}
			if m.isVolumeImage(vol) || m.isVolumeImage(prefixed) {
				t.Errorf("instance %q takes %q of instance %q for its own", m.instance, vol, n.instance)
			}
			if _, ok := m.hiddenID(hidden); ok {
				t.Errorf("instance %q takes hidden %q of instance %q for its own", m.instance, hidden, n.instance)
			}
			if m.image(volumePrefix, "pvc-1") == vol || m.snap("snap-1") == n.snap("snap-1") || m.tmpSnap("pvc-2") == n.tmpSnap("pvc-2") {
				t.Errorf("instances %q and %q name one request alike", m.instance, n.instance)
			}
			if m.object(claimIndex) == n.object(claimIndex) {
				t.Errorf("instances %q and %q share %s", m.instance, n.instance, m.object(claimIndex))
			}
		}
	}
	if got := instances[1].object(claimIndex); got != "rbdcsi.snapclaims.b" {
		t.Errorf("instance b's claim index is %q", got)
	}
	if got := instances[0].object(claimIndex); got != claimIndex {
		t.Errorf("the default instance's claim index is %q", got)
	}
}
