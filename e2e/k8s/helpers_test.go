//go:build e2e_k8s

// Package k8s holds the end-to-end scenarios on a real Kubernetes: the
// driver deployed with `kubectl apply -k deploy/e2e`, exercised through the
// Kubernetes API (kubectl) and inside pods, checked against Ceph.
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
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	driverName   = "rbd.csi.rbdcsi.dev"
	busybox      = "localhost/rbdcsi-e2e/busybox:1.35"
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
		{"get", "pods,pvc,volumesnapshots", "-o", "wide"},
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

// --- objects --------------------------------------------------------------------

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
