//go:build e2e_k8s

package k8s

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestVolumeAttributesClassSetsQoS: a claim made with a
// VolumeAttributesClass gets its QoS limits on the image (the provisioner
// passes the class as mutable parameters), and moving the claim to another
// class changes them (the resizer calls ControllerModifyVolume); the
// claim's status then names the new class.
func TestVolumeAttributesClassSetsQoS(t *testing.T) {
	scenario(t)
	k := newKube(t, "qos")
	slow, fast := "rbdcsi-e2e-slow-"+k.ns, "rbdcsi-e2e-fast-"+k.ns
	t.Cleanup(func() {
		// Runs before newKube's cleanup: the claim goes first, then the
		// classes it named.
		k.runQuiet(5*time.Minute, "delete", "pvc", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(time.Minute, "delete", "volumeattributesclass", slow, fast, "--ignore-not-found")
	})
	k.apply(fmt.Sprintf(`
apiVersion: storage.k8s.io/v1
kind: VolumeAttributesClass
metadata: {name: %s}
driverName: %s
parameters: {maxBps: "1048576", baseIops: "100", iopsPerGiB: "10"}
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttributesClass
metadata: {name: %s}
driverName: %s
parameters: {maxBps: "104857600", baseIops: "1000", iopsPerGiB: "10"}
`, slow, driverName, fast, driverName))
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: rbdcsi-ext4
  volumeAttributesClassName: %s
  resources:
    requests:
      storage: 2Gi
`, slow))
	img := imageOf(t, k.waitBound("data"))
	limits := func() string {
		var kv []string
		for _, key := range []string{"conf_rbd_qos_bps_limit", "conf_rbd_qos_iops_limit"} {
			kv = append(kv, strings.TrimSpace(ceph(t, k.e, "rbd", "image-meta", "get", pool+"/"+img, key)))
		}
		return strings.Join(kv, " ")
	}
	// 2 GiB: 100 IOPS + 10 per GiB.
	if got := limits(); got != "1048576 120" {
		t.Fatalf("image %s of a claim of class %s: limits (bps iops) %q, want \"1048576 120\"", img, slow, got)
	}

	k.must("patch", "pvc", "data", "--type=merge", "-p", fmt.Sprintf(`{"spec":{"volumeAttributesClassName":%q}}`, fast))
	var pvc corev1.PersistentVolumeClaim
	eventually(t, volumeWait, "claim data moved to class "+fast, func() (bool, string) {
		k.get(&pvc, "pvc", "data")
		cur := pvc.Status.CurrentVolumeAttributesClassName
		return cur != nil && *cur == fast, fmt.Sprintf("current %v, modify status %+v; %s", cur, pvc.Status.ModifyVolumeStatus, lastEvent(k, "pvc", "data"))
	})
	if got := limits(); got != "104857600 1020" {
		t.Errorf("after the move to %s: limits (bps iops) %q, want \"104857600 1020\"", fast, got)
	}
}
