//go:build e2e_k8s

package k8s

import (
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
)

// TestZZZHelmUninstallLeavesNothing runs after every other test of the Helm
// pass (file order), with their volumes gone: `helm uninstall` removes
// every object of the chart: no object labelled app.kubernetes.io/name=rbdcsi
// of any kind in any namespace, no CSIDriver, no node namespace, no release
// record, and kubelet no longer lists the driver on the node.
func TestZZZHelmUninstallLeavesNothing(t *testing.T) {
	h := loadHelmEnv(t)
	e := loadEnv(t)
	k := &kube{t: t, e: e}
	h.run(t, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "5m")

	// Every kind the API server lists (CRDs included), in one request.
	kinds := strings.Fields(k.must("api-resources", "--verbs=list", "-o", "name"))
	if len(kinds) < 20 {
		t.Fatalf("the API server lists only %d kinds: %v", len(kinds), kinds)
	}
	eventually(t, shortWait, "no object labelled app.kubernetes.io/name=rbdcsi", func() (bool, string) {
		out := strings.TrimSpace(k.must("get", strings.Join(kinds, ","), "--all-namespaces",
			"-l", "app.kubernetes.io/name=rbdcsi", "-o", "name", "--ignore-not-found"))
		return out == "", out
	})
	eventually(t, shortWait, "the node namespace and the CSIDriver gone", func() (bool, string) {
		out := strings.TrimSpace(k.must("get", "namespace/rbdcsi-node", "csidriver/"+driverName, "-o", "name", "--ignore-not-found"))
		return out == "", out
	})
	// Releases in every state (helm v4 has no --all).
	if out := strings.TrimSpace(h.run(t, "list", "--all-namespaces", "--short", "--deployed", "--failed", "--pending",
		"--superseded", "--uninstalling", "--uninstalled")); out != "" {
		t.Errorf("helm still lists releases: %s", out)
	}
	if out := strings.TrimSpace(k.must("get", "secrets", "--namespace", helmNamespace, "-l", "owner=helm", "-o", "name")); out != "" {
		t.Errorf("release records left: %s", out)
	}
	eventually(t, shortWait, "kubelet no longer listing the driver", func() (bool, string) {
		var n storagev1.CSINode
		if !k.get(&n, "csinode", e.nodeName) {
			return true, ""
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driverName {
				return false, "CSINode " + e.nodeName + " lists " + driverName
			}
		}
		return true, ""
	})
}
