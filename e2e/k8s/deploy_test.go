//go:build e2e_k8s

package k8s

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// TestDriverDeployed: what the guide installed (with deploy/e2e's
// component or Helm values) works without the node-driver-registrar and
// livenessprobe sidecars: the node plugin registered itself with kubelet
// (the CSINode lists the driver with the node's ID), and the built-in
// /healthz of both plugins answers, as the pods' liveness probes see it.
// The controller runs as shipped: in the pod network, in the node
// plugin's namespace, which enforces "privileged".
func TestDriverDeployed(t *testing.T) {
	e := loadEnv(t)
	k := &kube{t: t, e: e}

	var csiNode storagev1.CSINode
	if !k.get(&csiNode, "csinode", e.nodeName) {
		t.Fatalf("no CSINode for %s", e.nodeName)
	}
	found := false
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == driverName {
			found = true
			if d.NodeID != e.nodeName {
				t.Errorf("CSINode %s: driver %s has node ID %q, want %q", e.nodeName, driverName, d.NodeID, e.nodeName)
			}
		}
	}
	if !found {
		t.Fatalf("CSINode %s does not list %s: the built-in kubelet registration did not happen", e.nodeName, driverName)
	}
	if _, err := os.Stat("/var/lib/kubelet/plugins_registry/" + driverName + "-reg.sock"); err != nil {
		t.Errorf("registration socket: %v", err)
	}

	// Each plugin is asked where its liveness probe asks: the controller
	// on its pod's address, the node plugin (in the host network) on the
	// host's loopback.
	// The namespace is the node plugin's level; the controller pod meets
	// restricted (TestControllerAdmittedUnderRestricted).
	var ns corev1.Namespace
	if !k.get(&ns, "namespace", driverNamespace) || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s enforces %q, want privileged", driverNamespace, ns.Labels["pod-security.kubernetes.io/enforce"])
	}
	controllerIP := ""
	for _, p := range driverPods(t, k) {
		if p.Labels["app.kubernetes.io/component"] == "controller" {
			if p.Spec.HostNetwork {
				t.Errorf("controller pod %s runs in the host network", p.Name)
			}
			controllerIP = p.Status.PodIP
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for what, addr := range map[string]string{"controller": controllerIP + ":9808", "node": "127.0.0.1:9818"} {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Errorf("%s /healthz: %v", what, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("%s /healthz: %d %q", what, resp.StatusCode, body)
		}
	}

	// No sidecar of the base manifests is missing but the two stood in for;
	// csi-snapshot-metadata is there, as docs/backup.md added it, and the
	// csi-addons sidecars, as docs/csi-addons.md added them.
	pods := driverPods(t, k)
	want := map[string][]string{
		"controller": {"rbdplugin", "csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "csi-snapshot-metadata", "csi-addons"},
		"node":       {"rbdplugin", "csi-addons"},
	}
	for _, p := range pods {
		component := p.Labels["app.kubernetes.io/component"]
		var names []string
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		if strings.Join(names, ",") != strings.Join(want[component], ",") {
			t.Errorf("pod %s (%s) runs %v, want %v", p.Name, component, names, want[component])
		}
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready {
				t.Errorf("pod %s: container %s not ready", p.Name, c.Name)
			}
		}
	}
}

// checkDriverNotRestarted fails t if a driver container restarted (a
// failing liveness probe, a crash) during the run.
func checkDriverNotRestarted(t *testing.T, k *kube) {
	t.Helper()
	for _, p := range driverPods(t, k) {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("pod %s: container %s restarted %d times during the run", p.Name, c.Name, c.RestartCount)
			}
		}
	}
}

// driverNamespace is where deploy/kubernetes runs the controller and the
// node plugin.
const driverNamespace = "rbdcsi"

// driverPods lists the driver's pods once none is terminating; none after
// two minutes fails t. A rollout (docs/backup.md's adds a
// sidecar to the controller) leaves the old pod terminating for its grace
// period after `kubectl rollout status` returns, at an address that no
// longer answers.
func driverPods(t *testing.T, k *kube) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	eventually(t, 2*time.Minute, "the driver's old pods to terminate", func() (bool, string) {
		var pods corev1.PodList
		k.get(&pods, "pods", "--namespace", driverNamespace)
		if len(pods.Items) == 0 {
			return false, "no driver pods in namespace " + driverNamespace
		}
		var leaving []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				leaving = append(leaving, p.Name)
			}
		}
		out = pods.Items
		return len(leaving) == 0, "terminating: " + strings.Join(leaving, ", ")
	})
	return out
}
