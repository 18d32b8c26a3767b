//go:build e2e_k8s

package k8s

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

const zoneKey = "topology." + driverName + "/zone"

// TestTopologyConstrainedPools on Kubernetes: the node plugin reads its
// Node's topology.kubernetes.io/zone (zone-a, set by kubelet) through the
// API (deploy/topology) and reports it; a second node in zone-b (a Node and
// CSINode made by hand, as kubelet would make them) joins. A
// WaitForFirstConsumer class puts the pod's volume in zone-a's pool with
// node affinity to zone-a; an Immediate class that only zone-b's pool
// serves gets a volume accessible from zone-b only.
func TestTopologyConstrainedPools(t *testing.T) {
	scenario(t)
	k := newKube(t, "topology")
	var csiNode storagev1.CSINode
	if !k.get(&csiNode, "csinode", k.e.nodeName) {
		t.Fatalf("no CSINode %s", k.e.nodeName)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driverName })
	if i < 0 || !slices.Equal(csiNode.Spec.Drivers[i].TopologyKeys, []string{zoneKey}) {
		t.Fatalf("CSINode %s does not report the zone key: %+v", k.e.nodeName, csiNode.Spec.Drivers)
	}
	var node corev1.Node
	if !k.get(&node, "node", k.e.nodeName) || node.Labels[zoneKey] != "zone-a" {
		t.Fatalf("node %s is not labelled %s=zone-a by kubelet: %v", k.e.nodeName, zoneKey, node.Labels)
	}

	k.fakeNode("rbdcsi-e2e-zone-b", map[string]string{"topology.kubernetes.io/zone": "zone-b", zoneKey: "zone-b"}, zoneKey)
	params := k.shippedClassParams("clusterID")
	class := func(name, zone, binding string) string {
		name += "-" + k.ns
		t.Cleanup(func() { k.runQuiet(time.Minute, "delete", "storageclass", name, "--ignore-not-found") })
		k.apply(fmt.Sprintf(`
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: %s
reclaimPolicy: Delete
volumeBindingMode: %s
parameters:
%s
  topologyConstrainedPools: '[{"poolName": "%s", "domainSegments": [{"domainLabel": "zone", "value": "%s"}]}]'
`, name, driverName, binding, params, pool, zone))
		return name
	}
	t.Cleanup(func() { k.runQuiet(5*time.Minute, "delete", "pods,pvc", "--all", "--wait=true", "--timeout=4m") })

	k.createPVC(pvcOpts{name: "in-a", class: class("rbdcsi-zone-a", "zone-a", "WaitForFirstConsumer"), size: "64Mi"})
	k.createPod(podOpts{name: "in-a", pvc: "in-a"})
	k.waitRunning("in-a")
	k.mustExec("in-a", "echo zoned > /data/f && sync && cat /data/f")
	onlyZone(t, k.waitBound("in-a"), "zone-a")

	k.createPVC(pvcOpts{name: "in-b", class: class("rbdcsi-zone-b", "zone-b", "Immediate"), size: "64Mi"})
	onlyZone(t, k.waitBound("in-b"), "zone-b")
}

// onlyZone: the PV may be used in the zone only.
func onlyZone(t *testing.T, pv corev1.PersistentVolume, zone string) {
	t.Helper()
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		t.Fatalf("PV %s has no single node selector term: %+v", pv.Name, na)
	}
	exprs := na.Required.NodeSelectorTerms[0].MatchExpressions
	if len(exprs) != 1 || exprs[0].Key != zoneKey || exprs[0].Operator != corev1.NodeSelectorOpIn || !slices.Equal(exprs[0].Values, []string{zone}) {
		t.Errorf("PV %s node affinity %+v, want %s in [%s]", pv.Name, exprs, zoneKey, zone)
	}
}
