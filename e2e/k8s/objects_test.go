//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The Kubernetes objects the scenarios make and wait for.

type pvcOpts struct {
	name, class, size string
	block             bool
	dataSource        string // "VolumeSnapshot/NAME" or "PersistentVolumeClaim/NAME"
}

func (k *kube) createPVC(o pvcOpts) {
	k.t.Helper()
	mode := "Filesystem"
	if o.block {
		mode = "Block"
	}
	ds := ""
	if o.dataSource != "" {
		kind, name, _ := strings.Cut(o.dataSource, "/")
		group := ""
		if kind == "VolumeSnapshot" {
			group = "\n    apiGroup: snapshot.storage.k8s.io"
		}
		ds = fmt.Sprintf("\n  dataSource:\n    kind: %s\n    name: %s%s", kind, name, group)
	}
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %s
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: %s
  storageClassName: %s
  resources:
    requests:
      storage: %s%s
`, o.name, mode, o.class, o.size, ds))
}

// waitBound waits for the claim to be bound and returns its PV.
func (k *kube) waitBound(pvc string) corev1.PersistentVolume {
	k.t.Helper()
	var c corev1.PersistentVolumeClaim
	eventually(k.t, volumeWait, "PVC "+pvc+" bound", func() (bool, string) {
		if !k.get(&c, "pvc", pvc) {
			return false, "no PVC"
		}
		return c.Status.Phase == corev1.ClaimBound, string(c.Status.Phase)
	})
	var pv corev1.PersistentVolume
	if !k.get(&pv, "pv", c.Spec.VolumeName) {
		k.t.Fatalf("PV %s of PVC %s does not exist", c.Spec.VolumeName, pvc)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName || pv.Spec.CSI.VolumeHandle == "" {
		k.t.Fatalf("PV %s is not a %s volume: %+v", pv.Name, driverName, pv.Spec.PersistentVolumeSource)
	}
	return pv
}

type podOpts struct {
	name, pvc string
	block     bool
	nodeName  string // pin to a node (bypasses the scheduler)
}

// createPod starts a busybox pod with the claim at /data (or as the device
// /dev/xvda for block claims).
func (k *kube) createPod(o podOpts) {
	k.t.Helper()
	use := "    volumeMounts:\n    - {name: v, mountPath: /data}"
	if o.block {
		use = "    volumeDevices:\n    - {name: v, devicePath: /dev/xvda}"
	}
	node := ""
	if o.nodeName != "" {
		node = "\n  nodeName: " + o.nodeName + "\n  tolerations:\n  - {operator: Exists}"
	}
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5%s
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 36000 & wait"]
%s
  volumes:
  - name: v
    persistentVolumeClaim: {claimName: %s}
`, o.name, node, busybox, use, o.pvc))
}

func (k *kube) waitRunning(pod string) corev1.Pod {
	k.t.Helper()
	var p corev1.Pod
	eventually(k.t, volumeWait, "pod "+pod+" running", func() (bool, string) {
		if !k.get(&p, "pod", pod) {
			return false, "no pod"
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			k.t.Fatalf("pod %s ended: %s %s", pod, p.Status.Phase, p.Status.Message)
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + " " + lastEvent(k, "pod", pod)
	})
	return p
}

// deletePod deletes a pod and waits until it is gone (its volumes
// unpublished by then).
func (k *kube) deletePod(pod string) {
	k.t.Helper()
	if _, err := k.run(volumeWait, "", "delete", "pod", pod, "--wait=true", "--timeout=3m"); err != nil {
		k.t.Fatal(err)
	}
}

func lastEvent(k *kube, kind, name string) string {
	out, err := k.run(shortWait, "", "get", "events", "--field-selector",
		"involvedObject.kind="+kindName(kind)+",involvedObject.name="+name,
		"--sort-by=.lastTimestamp", "-o", "jsonpath={.items[-1:].reason}: {.items[-1:].message}")
	if err != nil {
		return ""
	}
	return out
}

func kindName(kind string) string {
	switch kind {
	case "pod":
		return "Pod"
	case "pvc":
		return "PersistentVolumeClaim"
	}
	return kind
}

// events returns "reason: message" lines for one object.
func (k *kube) events(kind, name string) string {
	k.t.Helper()
	return k.must("get", "events", "--field-selector", "involvedObject.kind="+kind+",involvedObject.name="+name,
		"-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
}

func (k *kube) resizePVC(pvc, size string) {
	k.t.Helper()
	k.must("patch", "pvc", pvc, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size))
}

func mustQuantity(t *testing.T, s string) resource.Quantity {
	t.Helper()
	q, err := resource.ParseQuantity(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// volumeAttachments lists the VolumeAttachments of one PV.
func (k *kube) volumeAttachments(pv string) []storagev1.VolumeAttachment {
	k.t.Helper()
	var list storagev1.VolumeAttachmentList
	k.get(&list, "volumeattachments")
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			out = append(out, va)
		}
	}
	return out
}

// fakeNode registers a Node and its CSINode by hand, as kubelet would for
// a node of the driver's (with the topology keys its plugin reports), that
// runs no pods: unschedulable, and tainted so that not even the driver's
// DaemonSet (which tolerates unschedulable) lands there. Both go when the
// test ends.
func (k *kube) fakeNode(name string, labels map[string]string, topologyKeys ...string) {
	k.t.Helper()
	all := map[string]string{"kubernetes.io/hostname": name, "rbdcsi-e2e": "fake"}
	for l, v := range labels {
		all[l] = v
	}
	labelsJSON, err := json.Marshal(all)
	if err != nil {
		k.t.Fatal(err)
	}
	keysJSON, err := json.Marshal(append([]string{}, topologyKeys...))
	if err != nil {
		k.t.Fatal(err)
	}
	cluster := &kube{t: k.t, e: k.e} // cluster-scoped objects
	cluster.apply(fmt.Sprintf(`
apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  labels: %[3]s
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
spec:
  unschedulable: true
  taints:
  - {key: rbdcsi-e2e/fake-node, value: "true", effect: NoSchedule}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: %[1]s
spec:
  drivers:
  - name: %[2]s
    nodeID: %[1]s
    topologyKeys: %[4]s
`, name, driverName, labelsJSON, keysJSON))
	k.t.Cleanup(func() {
		cluster.runQuiet(time.Minute, "delete", "csinode", name, "--ignore-not-found")
		cluster.runQuiet(time.Minute, "delete", "node", name, "--ignore-not-found")
	})
}

// shippedClassParams are YAML lines (two-space indented) of the shipped
// rbdcsi-ext4 class's parameters: its secret references and the keys
// named, for a test's own StorageClass of the same cluster.
func (k *kube) shippedClassParams(keys ...string) string {
	k.t.Helper()
	var base storagev1.StorageClass
	if !k.get(&base, "storageclass", "rbdcsi-ext4") {
		k.t.Fatal("no StorageClass rbdcsi-ext4")
	}
	var lines []string
	for key, v := range base.Parameters {
		if strings.HasPrefix(key, "csi.storage.k8s.io/") || slices.Contains(keys, key) {
			lines = append(lines, fmt.Sprintf("  %s: %q", key, v))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
