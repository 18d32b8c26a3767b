package volid

import (
	"strings"
	"testing"
)

func TestVolumeRoundTrip(t *testing.T) {
	v := Volume{ClusterID: "b9127830-b0cc-4e34-aa47-9d1a2e9949a8", Pool: "replicapool", Image: "csi-vol-0123456789abcdef0123"}
	id := v.String()
	got, err := DecodeVolume(id)
	if err != nil || got != v {
		t.Fatalf("DecodeVolume(%q) = %+v, %v; want %+v", id, got, err, v)
	}
	// Our own image names fit with the longest clusterID and pool.
	long := Volume{ClusterID: strings.Repeat("c", MaxClusterIDLen), Pool: strings.Repeat("p", MaxPoolLen), Image: "csi-vol-0123456789abcdef0123"}
	if err := long.Validate(); err != nil {
		t.Fatal(err)
	}
	// Other makers' longer names fit where the ID stays within MaxLen, and
	// are refused where it would not.
	static := Volume{ClusterID: "ceph1", Pool: "rbd", Image: "kubernetes-dynamic-pvc-" + strings.Repeat("u", 36)}
	if err := static.Validate(); err != nil {
		t.Fatal(err)
	}
	static.ClusterID, static.Pool = long.ClusterID, long.Pool
	if err := static.Validate(); err == nil || len(static.String()) <= MaxLen {
		t.Fatalf("a %d-byte volume ID validated: %v", len(static.String()), err)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := Snapshot{ClusterID: "c1", Pool: "rbd", ImageID: "10b2e8c1f3a4", Snap: "csi-snap-0011223344"}
	got, err := DecodeSnapshot(s.String())
	if err != nil || got != s {
		t.Fatalf("DecodeSnapshot = %+v, %v; want %+v", got, err, s)
	}
	long := Snapshot{ClusterID: strings.Repeat("c", MaxClusterIDLen), Pool: strings.Repeat("p", MaxPoolLen), ImageID: strings.Repeat("i", maxImageIDLen), Snap: strings.Repeat("s", maxSnapLen)}
	if n := len(long.String()); n > MaxLen {
		t.Fatalf("longest snapshot ID is %d bytes, over %d", n, MaxLen)
	}
	if _, err := DecodeVolume(s.String()); err == nil {
		t.Fatal("a snapshot ID decoded as a volume ID")
	}
}

func TestGroupRoundTrip(t *testing.T) {
	g := Group{ClusterID: "c1", Pool: "rbd", Group: "csi-vgs-00112233445566778899"}
	got, err := DecodeGroup(g.String())
	if err != nil || got != g {
		t.Fatalf("DecodeGroup = %+v, %v; want %+v", got, err, g)
	}
	long := Group{ClusterID: strings.Repeat("c", MaxClusterIDLen), Pool: strings.Repeat("p", MaxPoolLen), Group: strings.Repeat("g", 40)}
	if n := len(long.String()); n > MaxLen {
		t.Fatalf("a group ID with a 40-byte group name is %d bytes, over %d", n, MaxLen)
	}
	for _, id := range []string{g.String() + ":x", "g1:c:p:", "g1:c:p:..", "v1:c:p:i", "s1:c:p:i:s", "g2:c:p:g"} {
		if v, err := DecodeGroup(id); err != ErrMalformed {
			t.Errorf("DecodeGroup(%.40q) = %+v, %v; want ErrMalformed", id, v, err)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, id := range []string{
		"", "v1", "v1:", "v1:c:p", "v1:c:p:i:x", "v2:c:p:i", "V1:c:p:i", "v1::p:i", "v1:c::i", "v1:c:p:",
		"v1:../x:p:i", "v1:c:..:i", "v1:c:p:..", "v1:c:p:i\x00", "v1:c:p/q:i", "v1:c:p:i j", "v1:c;rm:p:i",
		"v1:c:p:" + strings.Repeat("i", 10000), "reallyfakevolumeid", "s1:c:p:i:s",
	} {
		if v, err := DecodeVolume(id); err != ErrMalformed {
			t.Errorf("DecodeVolume(%.40q) = %+v, %v; want ErrMalformed", id, v, err)
		}
	}
}
