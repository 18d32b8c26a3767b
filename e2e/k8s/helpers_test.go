//go:build e2e_k8s

// Package k8s holds the end-to-end scenarios on a real Kubernetes: the
// driver installed from a release as docs/install.md says (its first test
// runs the guide), exercised through the Kubernetes API (kubectl) and
// inside pods, checked against Ceph.
//
// scripts/k8s-e2e.sh (`make e2e`) boots everything and runs them; on their
// own (RBDCSI_E2E_K8S unset, as in `make integration`) they skip.
package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	driverName   = "rbd.csi.rbdcsi.dev"
	busybox      = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1" // as the examples and the guide name it
	pool         = "rbd"
	shortWait    = 2 * time.Minute
	volumeWait   = 4 * time.Minute
	stateDirHost = "/var/lib/rbdcsi/node" // the DaemonSet's --state-dir hostPath
)

// env is what scripts/k8s-e2e.sh exports.
type env struct {
	kubectl, kubeconfig string
	nodeName            string
	cephConf            string
	clusterConfig       string
	csiUser, csiKey     string
	rbdplugin           string
	work                string
}

func loadEnv(t *testing.T) env {
	t.Helper()
	if os.Getenv("RBDCSI_E2E_K8S") != "1" {
		t.Fatal("needs the Kubernetes node of scripts/k8s-e2e.sh: run make e2e")
	}
	e := env{
		kubectl:       os.Getenv("KUBECTL"),
		kubeconfig:    os.Getenv("KUBECONFIG"),
		nodeName:      os.Getenv("E2E_NODE_NAME"),
		cephConf:      os.Getenv("CEPH_CONF"),
		clusterConfig: os.Getenv("E2E_CLUSTER_CONFIG"),
		csiUser:       os.Getenv("CEPH_CSI_USER"),
		csiKey:        os.Getenv("CEPH_CSI_KEY"),
		rbdplugin:     os.Getenv("E2E_RBDPLUGIN"),
		work:          os.Getenv("E2E_WORK"),
	}
	for name, v := range map[string]string{
		"KUBECTL": e.kubectl, "KUBECONFIG": e.kubeconfig, "E2E_NODE_NAME": e.nodeName, "CEPH_CONF": e.cephConf,
		"E2E_CLUSTER_CONFIG": e.clusterConfig, "CEPH_CSI_USER": e.csiUser, "CEPH_CSI_KEY": e.csiKey,
		"E2E_RBDPLUGIN": e.rbdplugin, "E2E_WORK": e.work,
	} {
		if v == "" {
			t.Fatalf("%s is not set (run through scripts/k8s-e2e.sh)", name)
		}
	}
	return e
}

// kube runs kubectl against the test node, in one namespace.
type kube struct {
	t  *testing.T
	e  env
	ns string
}

// newKube makes a namespace for one test, deleted (with its PVCs,
// snapshots and pods) when the test ends.
func newKube(t *testing.T, name string) *kube {
	t.Helper()
	e := loadEnv(t)
	k := &kube{t: t, e: e, ns: "e2e-" + name}
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels: {rbdcsi-e2e: test}
`, k.ns))
	t.Cleanup(func() {
		if t.Failed() {
			k.dump()
		}
		// Pods first, then snapshots and claims: the driver must see every
		// volume through unpublish, unstage, detach and delete.
		k.runQuiet(5*time.Minute, "delete", "pods", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(5*time.Minute, "delete", "volumesnapshots,pvc", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(5*time.Minute, "delete", "namespace", k.ns, "--wait=true", "--timeout=4m")
	})
	return k
}

// run runs kubectl in the namespace; stdin is optional.
func (k *kube) run(timeout time.Duration, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append([]string{"--kubeconfig", k.e.kubeconfig}, args...)
	if k.ns != "" {
		full = append([]string{"--namespace", k.ns}, full...)
	}
	// runs: $RBDCSI_E2E_CACHE/bin/kubectl (built by scripts/k8s-build.sh)
	cmd := exec.CommandContext(ctx, k.e.kubectl, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (k *kube) runQuiet(timeout time.Duration, args ...string) {
	if _, err := k.run(timeout, "", args...); err != nil {
		k.t.Logf("cleanup: %v", err)
	}
}

func (k *kube) must(args ...string) string {
	k.t.Helper()
	out, err := k.run(shortWait, "", args...)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

func (k *kube) apply(manifest string) {
	k.t.Helper()
	if _, err := k.run(shortWait, manifest, "apply", "-f", "-"); err != nil {
		k.t.Fatalf("%v\n%s", err, manifest)
	}
}

// get decodes `kubectl get -o json` into v; false if it does not exist.
func (k *kube) get(v any, args ...string) bool {
	k.t.Helper()
	out, err := k.run(shortWait, "", append([]string{"get", "-o", "json"}, args...)...)
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") {
			return false
		}
		k.t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		k.t.Fatalf("decoding %v: %v", args, err)
	}
	return true
}

// exec runs a shell command in a pod's container.
func (k *kube) exec(pod, script string) (string, error) {
	return k.run(shortWait, "", "exec", pod, "-c", "c", "--", "/bin/sh", "-c", script)
}

func (k *kube) mustExec(pod, script string) string {
	k.t.Helper()
	out, err := k.exec(pod, script)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

// eventually polls cond every second until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last: %s)", timeout, what, last)
		}
		time.Sleep(time.Second)
	}
}

func (k *kube) dump() {
	for _, args := range [][]string{
		// Every namespace's pods with their addresses: the driver's pods
		// beside the test's show a pod network fault (two pods, one IP).
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "pvc,volumesnapshots", "-o", "wide"},
		{"describe", "pods"},
		{"describe", "pvc"},
		{"describe", "volumesnapshots"},
		{"get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, err := k.run(shortWait, "", args...)
		k.t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrEmpty(err))
	}
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func token(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// --- Ceph -----------------------------------------------------------------------

// ceph runs an rbd/rados/ceph CLI command as the cluster admin.
func ceph(t *testing.T, e env, tool string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, append([]string{"-c", e.cephConf}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", tool, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// run runs a host tool, bounded, and returns its standard output.
func run(t *testing.T, tool string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// runs: mkfs.ext4 debugfs dumpe2fs (the callers say which)
	cmd := exec.CommandContext(ctx, tool, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", tool, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// imageOf returns the RBD image name of a PV, from its volume ID
// (v1:<clusterID>:<pool>:<image>).
func imageOf(t *testing.T, pv corev1.PersistentVolume) string {
	t.Helper()
	parts := strings.Split(pv.Spec.CSI.VolumeHandle, ":")
	if len(parts) != 4 || parts[0] != "v1" || parts[2] != pool {
		t.Fatalf("unexpected volume ID %q", pv.Spec.CSI.VolumeHandle)
	}
	return parts[3]
}
