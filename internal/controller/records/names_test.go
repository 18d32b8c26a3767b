package records

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func TestImageName(t *testing.T) {
	n := NewNames("", []string{"k8s-prod-"})
	a, b := n.Image(VolumePrefix, "pvc-1"), n.Image(VolumePrefix, "pvc-2")
	if a == b || a != n.Image(VolumePrefix, "pvc-1") || !n.IsVolumeImage(a) {
		t.Fatalf("image: %q %q", a, b)
	}
	// The default instance names images as the driver always has: existing
	// volumes keep being found.
	sum := sha256.Sum256([]byte("pvc-1"))
	if want := "csi-vol-" + hex.EncodeToString(sum[:10]); a != want {
		t.Fatalf("default image name %q, want %q", a, want)
	}
	prod := n.Image("k8s-prod-", "pvc-1")
	if prod != "k8s-prod-"+a[len(VolumePrefix):] || !n.IsVolumeImage(prod) {
		t.Fatalf("image with a prefix: %q", prod)
	}
	for _, other := range []string{
		"csi-vol-x", "foo", "csi-del-" + a[len("csi-vol-"):],
		"csi-vol-0123456789ABCDEF0123",                 // not ours: upper case
		"csi-vol-0123456789abcdefg123",                 // not hex
		"csi-vol-4b8d7a1e-5f0c-11ee-8c99-0242ac120002", // another driver's UUID name
		"k8s-dev-" + a[len(VolumePrefix):],             // a prefix the controller was not given
	} {
		if n.IsVolumeImage(other) {
			t.Errorf("%q taken for a volume image", other)
		}
	}
	// The finished mark holds for the prefix the metadata records.
	meta := map[string]string{MetaName: "pvc-1", metaNamePrefix: "k8s-prod-"}
	if !n.Volume(prod, meta).Finished() || n.Volume(a, meta).Finished() || !n.Volume(a, map[string]string{MetaName: "pvc-1"}).Finished() {
		t.Error("finished does not follow the recorded name prefix")
	}
}

// Instances sharing a pool never take each other's images, hidden images,
// snapshots or index objects for their own, whatever their IDs.
func TestInstanceNaming(t *testing.T) {
	instances := []Names{
		NewNames("", []string{"k8s-"}), NewNames("b", []string{"k8s-"}), NewNames("ab", []string{"k8s-"}),
		NewNames("a-b", []string{"k8s-"}), NewNames("0123456789abcdef", []string{"k8s-"}),
	}
	for i, n := range instances {
		vol, prefixed, hidden := n.Image(VolumePrefix, "pvc-1"), n.Image("k8s-", "pvc-1"), n.Hidden("10ab3c4d5e6f")
		if !n.IsVolumeImage(vol) || !n.IsVolumeImage(prefixed) || !n.Volume(vol, map[string]string{MetaName: "pvc-1"}).Finished() {
			t.Errorf("instance %q does not know its own volume %q", n.instance, vol)
		}
		if id, ok := n.HiddenID(hidden); !ok || id != "10ab3c4d5e6f" {
			t.Errorf("instance %q: hidden %q gives %q, %v", n.instance, hidden, id, ok)
		}
		for j, m := range instances {
			if i == j {
				continue
			}
			if m.IsVolumeImage(vol) || m.IsVolumeImage(prefixed) {
				t.Errorf("instance %q takes %q of instance %q for its own", m.instance, vol, n.instance)
			}
			if _, ok := m.HiddenID(hidden); ok {
				t.Errorf("instance %q takes hidden %q of instance %q for its own", m.instance, hidden, n.instance)
			}
			if m.Image(VolumePrefix, "pvc-1") == vol || m.Snap("snap-1") == n.Snap("snap-1") || m.TmpSnap("pvc-2") == n.TmpSnap("pvc-2") {
				t.Errorf("instances %q and %q name one request alike", m.instance, n.instance)
			}
			if m.Object(claimIndex) == n.Object(claimIndex) {
				t.Errorf("instances %q and %q share %s", m.instance, n.instance, m.Object(claimIndex))
			}
		}
	}
	if got := instances[1].Object(claimIndex); got != "rbdcsi.snapclaims.b" {
		t.Errorf("instance b's claim index is %q", got)
	}
	if got := instances[0].Object(claimIndex); got != claimIndex {
		t.Errorf("the default instance's claim index is %q", got)
	}
}
