//go:build e2e_k8s

package k8s

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The driver installed with `helm install` (scripts/k8s-e2e.sh's second
// pass): the release, its namespace, and the helm wrapper bound to the
// test node's kubeconfig.
const (
	helmRelease   = "rbdcsi"
	helmNamespace = "rbdcsi"
)

// helmEnv is what the Helm pass exports on top of loadEnv's.
type helmEnv struct {
	helm, chart string
}

func loadHelmEnv(t *testing.T) helmEnv {
	t.Helper()
	loadEnv(t)
	h := helmEnv{helm: os.Getenv("E2E_HELM"), chart: os.Getenv("E2E_HELM_CHART")}
	if os.Getenv("RBDCSI_E2E_INSTALL") != "helm" || h.helm == "" || h.chart == "" {
		t.Fatal("needs the driver installed by helm: scripts/k8s-e2e.sh runs this in its Helm pass")
	}
	return h
}

// run runs helm (argv, no shell) and fails t on error.
func (h helmEnv) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// runs: $RBDCSI_E2E_CACHE/bin/helm (built by scripts/k8s-build.sh), through $E2E_HELM
	out, err := exec.CommandContext(ctx, h.helm, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// readerScript writes a random marker, then for as long as the pod lives
// writes and fsyncs a counter (through the mapping to Ceph) and checks the
// marker, printing "ok N" each round; the first failure ends the pod
// (restartPolicy Never), so a broken volume shows as a failed pod.
const readerScript = `set -e
head -c 1048576 /dev/urandom > /data/marker
sync /data/marker
sum=$(md5sum < /data/marker | cut -c1-32)
echo "$sum" > /data/marker.md5
sync /data/marker.md5
n=0
trap 'exit 0' TERM
while :; do
  n=$((n+1))
  echo "$n" > /data/tick || { echo "FAIL write $n"; exit 1; }
  sync /data/tick || { echo "FAIL fsync $n"; exit 1; }
  [ "$(md5sum < /data/marker | cut -c1-32)" = "$sum" ] || { echo "FAIL marker $n"; exit 1; }
  echo "ok $n"
  sleep 0.5
done`

// TestHelmUpgradeUnderMountedVolume: a pod keeps writing and reading its
// volume while `helm upgrade` changes the controller's log verbosity and
// `helm rollback` undoes it. The pod is never restarted, never sees an
// error, its data is intact, the node plugin is not touched (a change of
// controller values must not roll the DaemonSet), and the upgraded
// controller provisions.
func TestHelmUpgradeUnderMountedVolume(t *testing.T) {
	h := loadHelmEnv(t)
	k := newKube(t, "helm-upgrade")
	k.createPVC(pvcOpts{name: "data", class: "rbdcsi-ext4", size: "1Gi"})
	k.waitBound("data")
	k.apply(`
apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: ` + busybox + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", ` + jsonString(readerScript) + `]
    volumeMounts:
    - {name: v, mountPath: /data}
  volumes:
  - name: v
    persistentVolumeClaim: {claimName: data}
`)
	before := k.waitRunning("reader")
	rounds := func() int {
		t.Helper()
		out := k.must("logs", "reader")
		if strings.Contains(out, "FAIL") {
			t.Fatalf("the reader failed on its volume:\n%s", out)
		}
		return strings.Count(out, "ok ")
	}
	eventually(t, shortWait, "the reader's first rounds", func() (bool, string) {
		n := rounds()
		return n >= 3, "rounds: " + strconv.Itoa(n)
	})
	nodePod := onePod(t, k, "rbdcsi", "node")
	controllerPod := onePod(t, k, helmNamespace, "controller")

	// The revision the upgrade starts from (docs/backup.md and
	// docs/csi-addons.md upgraded the install already), which the rollback
	// returns to.
	var st struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(h.run(t, "status", helmRelease, "--namespace", helmNamespace, "-o", "json")), &st); err != nil || st.Version == 0 {
		t.Fatalf("helm status: revision %d, %v", st.Version, err)
	}
	from := strconv.Itoa(st.Version)
	h.run(t, "upgrade", helmRelease, h.chart, "--namespace", helmNamespace, "--reuse-values",
		"--set", "controller.logLevel=5", "--wait", "--timeout", "5m")
	if v := pluginArg(t, k, "--v="); v != "--v=5" {
		t.Errorf("after the upgrade the controller runs with %s, want --v=5", v)
	}
	if p := onePod(t, k, helmNamespace, "controller"); p.UID == controllerPod.UID {
		t.Errorf("helm upgrade --wait returned with the old controller pod %s still the running one", p.Name)
	}
	// The upgraded controller serves: a new claim is provisioned.
	k.createPVC(pvcOpts{name: "after-upgrade", class: "rbdcsi-ext4", size: "1Gi"})
	k.waitBound("after-upgrade")
	mid := rounds()

	h.run(t, "rollback", helmRelease, from, "--namespace", helmNamespace, "--wait", "--timeout", "5m")
	if v := pluginArg(t, k, "--v="); v != "--v=2" {
		t.Errorf("after the rollback the controller runs with %s, want --v=2", v)
	}
	history := h.run(t, "history", helmRelease, "--namespace", helmNamespace)
	if !strings.Contains(history, "Rollback to "+from) {
		t.Errorf("helm history shows no rollback:\n%s", history)
	}
	eventually(t, shortWait, "the reader going on after the rollback", func() (bool, string) {
		n := rounds()
		return n > mid+3, "rounds: " + strconv.Itoa(n)
	})

	after := k.waitRunning("reader")
	if after.UID != before.UID || restarts(after) != 0 {
		t.Errorf("the reader was replaced or restarted (uid %s -> %s, restarts %d)", before.UID, after.UID, restarts(after))
	}
	if got := onePod(t, k, "rbdcsi", "node"); got.UID != nodePod.UID {
		t.Errorf("the node plugin was replaced (%s -> %s) by a change of controller values", nodePod.Name, got.Name)
	}
	// The data the pod wrote before the upgrade, read back afresh.
	if out := k.mustExec("reader", `[ "$(md5sum < /data/marker | cut -c1-32)" = "$(cat /data/marker.md5)" ] && echo same`); strings.TrimSpace(out) != "same" {
		t.Errorf("the marker changed across the upgrade: %q", out)
	}
	// The upgrade and the rollback replaced the controller pod twice: as
	// docs/csi-addons.md says after such a rollout, restart the csi-addons
	// controller, which otherwise keeps dead connections to the replaced
	// pods' sidecars and fails every ReclaimSpaceJob of a volume on their
	// node (TestReclaimSpaceJob runs after this test).
	k.must("--namespace", "csi-addons-system", "rollout", "restart", "deployment/csi-addons-controller-manager")
	k.must("--namespace", "csi-addons-system", "rollout", "status", "deployment/csi-addons-controller-manager", "--timeout=90s")
}

// onePod is the one running pod of a driver component in namespace ns.
func onePod(t *testing.T, k *kube, ns, component string) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	k.get(&pods, "pods", "--namespace", ns, "-l", "app.kubernetes.io/component="+component)
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		t.Fatalf("want one running %s pod in %s, have %d", component, ns, len(running))
	}
	return running[0]
}

// pluginArg is the controller Deployment's plugin argument that starts
// with prefix ("" if none).
func pluginArg(t *testing.T, k *kube, prefix string) string {
	t.Helper()
	var d appsv1.Deployment
	if !k.get(&d, "deployment", "rbdcsi-controller", "--namespace", helmNamespace) {
		t.Fatal("no Deployment rbdcsi-controller")
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "rbdplugin" {
			continue
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, prefix) {
				return a
			}
		}
	}
	return ""
}

// jsonString quotes s as a JSON string, which YAML reads as the same
// double-quoted scalar.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
