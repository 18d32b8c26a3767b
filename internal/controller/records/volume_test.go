package records

import (
	"reflect"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// What CreateVolume writes reads back as the same volume, and the state
// follows the image's name and its own request name.
func TestVolumeRecordRoundTrip(t *testing.T) {
	n := NewNames("", []string{"k8s-prod-"})
	qos, err := config.ParseQoS(map[string]string{"maxIOPS": "100"})
	if err != nil {
		t.Fatal(err)
	}
	key := kms.VolumeKey{KMSID: "vault", DEK: "v1.kek-1.AAAA.BBBB.CCCC", State: kms.StatePrepared}.Metadata()
	nv := NewVolume{
		Name: "pvc-1", NamePrefix: "k8s-prod-", QoS: qos, Size: 1 << 30,
		Owner:  config.Owner{PVCName: "data", PVCNamespace: "app", PVName: "pvc-1"},
		Source: "s1:c:rbd:10ab:csi-snap-0011", Depth: 3, Key: key,
	}
	image := n.Image("k8s-prod-", "pvc-1")
	meta := nv.Metadata()
	v := n.Volume(image, meta)
	if v.State != Finished || v.Name != "pvc-1" || v.NamePrefix != "k8s-prod-" || v.Source != nv.Source || v.Depth != 3 || v.Owner != nv.Owner {
		t.Fatalf("read back %+v from %v", v, meta)
	}
	if q, err := v.QoSPolicy(); err != nil || q.String() != qos.String() {
		t.Errorf("QoS %v, %v; want %v", q, err, qos)
	}
	if k, ok, err := v.Key(); err != nil || !ok || k.KMSID != "vault" || !v.Encrypted() {
		t.Errorf("key record %+v %v %v", k, ok, err)
	}
	if n.OriginalImage(v) != image {
		t.Errorf("original image %q, want %q", n.OriginalImage(v), image)
	}
	// A clone carries its parent's name until it gets its own.
	if s := n.Volume(n.Image(VolumePrefix, "pvc-2"), meta).State; s != Unfinished {
		t.Errorf("an image carrying another volume's name is %v, want Unfinished", s)
	}
	if s := n.Volume(n.Hidden("10ab"), meta).State; s != Hidden {
		t.Errorf("a hidden image is %v", s)
	}
	if s := n.Volume("static-image", meta).State; s != Other {
		t.Errorf("an image not named like ours is %v", s)
	}
	// A plain volume with the default prefix records neither prefix, nor
	// source, nor key.
	plain := NewVolume{Name: "pvc-3", Size: 1 << 30}.Metadata()
	if want := map[string]string{MetaName: "pvc-3"}; !reflect.DeepEqual(plain, want) {
		t.Errorf("plain volume metadata %v, want %v", plain, want)
	}
	if v := n.Volume(n.Image(VolumePrefix, "pvc-3"), plain); !v.Finished() || v.Encrypted() || v.Depth != 0 || v.NamePrefix != VolumePrefix {
		t.Errorf("plain volume read back as %+v", v)
	}
}

func TestSnapshotOwner(t *testing.T) {
	owner := config.SnapshotOwner{Name: "snap-1", Namespace: "app", Content: "snapcontent-1"}
	value, err := SnapshotOwnerValue(owner)
	if err != nil {
		t.Fatal(err)
	}
	v := NewNames("", nil).Volume("img", map[string]string{SnapshotOwnerKey("csi-snap-01"): value})
	if got, ok := v.SnapshotOwner("csi-snap-01"); !ok || got != value {
		t.Errorf("owner %q, %v", got, ok)
	}
	if _, ok := v.SnapshotOwner("csi-snap-02"); ok {
		t.Error("an owner for a snapshot never named")
	}
}
