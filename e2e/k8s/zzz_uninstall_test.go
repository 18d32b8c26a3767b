//go:build e2e_k8s

package k8s

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
)

// TestZZZUninstallLeavesNothing runs after every other test of a pass
// (file order), with their volumes gone: docs/install.md's uninstall for
// this pass's path (kubectl delete -k, or helm uninstall and the
// namespaces; then the node registry object and the Ceph users) removes
// every object of the driver: no object labelled app.kubernetes.io/name=rbdcsi
// of any kind in any namespace, no CSIDriver, neither namespace, no Helm
// release or release record; kubelet no longer lists the driver; and in
// Ceph no node registry object and none of the users (docs/csi-addons.md's
// fencing user included).
func TestZZZUninstallLeavesNothing(t *testing.T) {
	final(t)
	g := loadGuideRun(t)
	e := loadEnv(t)
	k := &kube{t: t, e: e}
	saveDriverLogs(t, k, filepath.Join(e.work, "driver-logs-"+g.path))
	// What docs/csi-addons.md made beside the driver (the fencing user),
	// then the driver.
	g.run(t, csiAddonsFile, true, 5*time.Minute)
	g.run(t, installFile, true, 10*time.Minute)

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
	eventually(t, shortWait, "the namespace and the CSIDriver gone", func() (bool, string) {
		out := strings.TrimSpace(k.must("get", "namespace/rbdcsi", "csidriver/"+driverName,
			"-o", "name", "--ignore-not-found"))
		return out == "", out
	})
	if g.path == "helm" {
		h := loadHelmEnv(t)
		// Releases in every state (helm v4 has no --all).
		if out := strings.TrimSpace(h.run(t, "list", "--all-namespaces", "--short", "--deployed", "--failed", "--pending",
			"--superseded", "--uninstalling", "--uninstalled")); out != "" {
			t.Errorf("helm still lists releases: %s", out)
		}
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

	// Ceph: what the guide's last block removes.
	guidePool := g.values["POOL"]
	for _, probe := range [][]string{
		{"rados", "-p", guidePool, "stat", "rbdcsi.nodes"},
		{"ceph", "auth", "get", "client." + g.values["CSI_USER"]},
		{"ceph", "auth", "get", "client." + g.values["NODE_USER"]},
		{"ceph", "auth", "get", "client.rbdcsi-fence"},
	} {
		if out, err := cephTry(e, probe[0], probe[1:]...); err == nil || !strings.Contains(out, "No such file or directory") && !strings.Contains(out, "ENOENT") && !strings.Contains(out, "failed to find") {
			t.Errorf("after the uninstall, %s: %v: %s", strings.Join(probe, " "), err, out)
		}
	}
}

// saveDriverLogs keeps the logs of every container of the driver's pods
// in dir before the uninstall takes them away: a failed scenario before
// this test leaves the driver's side of it there (scripts/k8s-e2e.sh
// keeps dir with the run's artifacts).
func saveDriverLogs(t *testing.T, k *kube, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range driverPods(t, k) {
		for _, c := range p.Spec.Containers {
			out, err := k.run(time.Minute, "", "logs", "--namespace", p.Namespace, p.Name, "-c", c.Name)
			if err != nil {
				out += "\n" + err.Error()
			}
			if err := os.WriteFile(filepath.Join(dir, p.Name+"."+c.Name+".log"), []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// cephTry runs a Ceph CLI command as the cluster admin and returns its
// output and error, for checks that expect a refusal.
func cephTry(e env, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// runs: ceph rados (ceph-common)
	out, err := exec.CommandContext(ctx, tool, append([]string{"-c", e.cephConf}, args...)...).CombinedOutput()
	return string(out), err
}
