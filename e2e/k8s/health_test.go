//go:build e2e_k8s

package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// The node's health reaches Kubernetes through the kubelet's volume health
// manager (feature gate CSIVolumeHealth, which scripts/k8s-node.sh turns
// on, probing every volumeStatsAggPeriod): NodeGetVolumeHealth into the
// pod's status.volumeHealth, NodeGetStorageHealth into the CSINode's
// status.storageHealth. docs/operations.md, "Volume health", tells users
// where to look.

// TestVolumeHealthReachesThePod: the filesystem of a mounted claim turned
// read-only under its pod (as the kernel does after an I/O error) shows
// in the pod's status as FilesystemReadOnly, and goes when it is writable
// again.
func TestVolumeHealthReachesThePod(t *testing.T) {
	scenario(t)
	k := newKube(t, "health-pod")
	k.createPVC(pvcOpts{name: "data", class: "rbdcsi-ext4", size: "128Mi"})
	k.createPod(podOpts{name: "app", pvc: "data"})
	pv := k.waitBound("data")
	k.waitRunning("app")
	k.mustExec("app", "echo before > /data/f && sync")

	// The staging mount, where kubelet asked the driver to stage it.
	sum := sha256.Sum256([]byte(pv.Spec.CSI.VolumeHandle))
	staging := filepath.Join("/var/lib/kubelet/plugins/kubernetes.io/csi", driverName, hex.EncodeToString(sum[:]), "globalmount")
	run(t, "mountpoint", "-q", staging)
	// A superblock remount (not a bind remount): every mount of the
	// filesystem, the pod's and the plugin's, sees it read-only.
	run(t, "mount", "-o", "remount,ro", staging)
	rw := false
	t.Cleanup(func() {
		if !rw {
			run(t, "mount", "-o", "remount,rw", staging)
		}
	})
	eventually(t, volumeWait, "FilesystemReadOnly in the pod's status", func() (bool, string) {
		got := podVolumeHealth(k, "app", "v")
		return slices.Contains(got, "Inaccessible FilesystemReadOnly"), fmt.Sprint(got)
	})
	if _, err := k.exec("app", "echo during > /data/f"); err == nil {
		t.Fatal("the pod wrote to a filesystem reported read-only")
	}

	run(t, "mount", "-o", "remount,rw", staging)
	rw = true
	eventually(t, volumeWait, "the condition gone from the pod's status", func() (bool, string) {
		got := podVolumeHealth(k, "app", "v")
		return len(got) == 0, fmt.Sprint(got)
	})
	if out := k.mustExec("app", "cat /data/f"); strings.TrimSpace(out) != "before" {
		t.Fatalf("the data after the repair: %q, want \"before\"", out)
	}
}

// podVolumeHealth reads a pod volume's conditions as "Status Reason".
func podVolumeHealth(k *kube, pod, volume string) []string {
	var p corev1.Pod
	if !k.get(&p, "pod", pod) {
		k.t.Fatalf("pod %s is gone", pod)
	}
	var out []string
	for _, v := range p.Status.VolumeHealth {
		if v.Name == volume {
			for _, c := range v.HealthConditions {
				out = append(out, string(c.Status)+" "+c.Reason)
			}
		}
	}
	return out
}

// TestStorageHealthReachesTheCSINode: a cluster in the node plugin's
// cluster map whose monitors do not answer shows in the node's CSINode
// status as ClusterUnreachable, naming it, and goes when the map no
// longer names it. The driver's one map changes: the controller's upkeep
// meets the extra entry too (and logs that it cannot reach it), the
// volumes of the other scenarios never name it.
func TestStorageHealthReachesTheCSINode(t *testing.T) {
	scenario(t)
	e := loadEnv(t)
	k := &kube{t: t, e: e}
	// Port 9 (discard) of the node's loopback: nothing listens, nothing
	// leaves the node.
	const unreachable = "e2e-unreachable"
	addToClusterMap(t, k, map[string]any{"clusterID": unreachable, "monitors": []string{"127.0.0.1:9"}})
	// The kubelet refreshes the mounted map within a minute, the plugin
	// re-reads it on the next call, the health manager asks every
	// volumeStatsAggPeriod.
	eventually(t, volumeWait, "ClusterUnreachable in the CSINode's status", func() (bool, string) {
		got := storageHealth(k, e.nodeName)
		return slices.ContainsFunc(got, func(c storagev1.StorageHealthCondition) bool {
			return c.Status == storagev1.StorageUnreachable && c.Reason == "ClusterUnreachable" && strings.Contains(c.Message, unreachable)
		}), fmt.Sprint(got)
	})
	removeFromClusterMap(t, k, unreachable)
	eventually(t, volumeWait, "the condition gone from the CSINode's status", func() (bool, string) {
		got := storageHealth(k, e.nodeName)
		return len(got) == 0, fmt.Sprint(got)
	})
}

// storageHealth reads the driver's storage conditions on a node.
func storageHealth(k *kube, node string) []storagev1.StorageHealthCondition {
	var n storagev1.CSINode
	if !k.get(&n, "csinode", node) {
		k.t.Fatalf("no CSINode %s", node)
	}
	for _, h := range n.Status.StorageHealth {
		if h.Name == driverName {
			return h.HealthConditions
		}
	}
	return nil
}
