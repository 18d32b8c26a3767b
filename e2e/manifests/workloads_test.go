package manifests

import (
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// The downward-API values used to expand $(VAR) in args.
var fieldValues = map[string]string{"spec.nodeName": "node-1"}

// asWorkload views one Deployment or DaemonSet as a workload, checking on
// the way that its selector picks its own pod template: otherwise the
// controller would never own the pods it creates.
func asWorkload(t *testing.T, obj runtime.Object, sel *metav1.LabelSelector) workload {
	t.Helper()
	w := workloads(&manifests{objects: []object{{obj: obj}}})[0]
	if s, err := metav1.LabelSelectorAsSelector(sel); err != nil || !s.Matches(labels.Set(w.labels)) {
		t.Errorf("%s: selector does not match its pod template: %v", w.name, err)
	}
	return w
}

func privileged(c corev1.Container) bool {
	sc := c.SecurityContext
	return sc != nil && sc.Privileged != nil && *sc.Privileged
}

// TestControllerDeployment: two replicas, every sidecar elects a leader,
// plugin in controller mode, all sidecars present.
func TestControllerDeployment(t *testing.T) {
	d := only[*appsv1.Deployment](t, installed(t), "Deployment")
	w := asWorkload(t, d, d.Spec.Selector)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("controller replicas = %s, want 2", fmtPtr(d.Spec.Replicas))
	}
	if got := mustFlags(t, oneContainer(t, w, pluginRepo))["mode"]; got != "controller" {
		t.Errorf("controller plugin --mode=%s, want controller", got)
	}
	for _, repo := range []string{provisionerRepo, attacherRepo, resizerRepo, snapshotterRepo} {
		c := oneContainer(t, w, repo)
		if v := mustFlags(t, c)["leader-election"]; v != "true" {
			t.Errorf("%s: --leader-election is %q, want set", c.Name, v)
		}
	}
	oneContainer(t, w, livenessRepo)
	for _, v := range w.spec.Volumes {
		if v.Name == "socket-dir" && v.EmptyDir == nil {
			t.Errorf("controller socket-dir must be an emptyDir")
		}
	}
}

// TestNodeDaemonSet: privileged plugin in node mode on the host network,
// node name from the downward API, the host directories it needs, and the
// state directory on the host.
func TestNodeDaemonSet(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, installed(t), "DaemonSet")
	w := asWorkload(t, ds, ds.Spec.Selector)
	if !w.spec.HostNetwork {
		t.Error("node pod: hostNetwork must be true")
	}
	plugin := oneContainer(t, w, pluginRepo)
	if !privileged(plugin) {
		t.Error("node plugin must be privileged")
	}
	args := mustFlags(t, plugin)
	if args["mode"] != "node" {
		t.Errorf("node plugin --mode=%s, want node", args["mode"])
	}
	nodeID, err := expandEnv(plugin, args["nodeid"], fieldValues)
	if err != nil || nodeID != fieldValues["spec.nodeName"] {
		t.Errorf("node plugin --nodeid=%s must come from spec.nodeName (got %q, %v)", args["nodeid"], nodeID, err)
	}
	oneContainer(t, w, registrarRepo)
	oneContainer(t, w, livenessRepo)

	// host path -> (mount path in the plugin, read-only, propagation)
	type want struct {
		hostPath    string
		mountPath   string
		readOnly    bool
		propagation corev1.MountPropagationMode
	}
	for _, wm := range []want{
		{"/dev", "/dev", false, ""},
		{"/sys", "/sys", false, ""},
		{"/lib/modules", "/lib/modules", true, ""},
		{kubeletPluginsDir, kubeletPluginsDir, false, corev1.MountPropagationBidirectional},
		{kubeletPodsDir, kubeletPodsDir, false, corev1.MountPropagationBidirectional},
	} {
		v, mount, rel, err := resolve(w.spec, plugin, wm.mountPath)
		switch {
		case err != nil:
			t.Errorf("node plugin: %v", err)
		case v.HostPath == nil || path.Clean(path.Join(v.HostPath.Path, rel)) != wm.hostPath || path.Clean(mount.MountPath) != wm.mountPath:
			t.Errorf("node plugin: %s must be the host's %s", wm.mountPath, wm.hostPath)
		case mount.ReadOnly != wm.readOnly:
			t.Errorf("node plugin: %s readOnly=%v, want %v", wm.mountPath, mount.ReadOnly, wm.readOnly)
		case wm.propagation != "" && (mount.MountPropagation == nil || *mount.MountPropagation != wm.propagation):
			t.Errorf("node plugin: %s needs mountPropagation %s", wm.mountPath, wm.propagation)
		}
	}
	// Of kubelet's directory, only the parts CSI paths and registration
	// sockets lie in: never its own credentials and state.
	for _, v := range w.spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		p := path.Clean(v.HostPath.Path)
		if p != kubeletDir && !strings.HasPrefix(p, kubeletDir+"/") {
			continue
		}
		if !slices.ContainsFunc([]string{kubeletPluginsDir, kubeletPodsDir, kubeletRegistryDir}, func(d string) bool {
			return p == d || strings.HasPrefix(p, d+"/")
		}) {
			t.Errorf("node pod: volume %s mounts the host's %s, outside %s/{plugins,pods,plugins_registry}", v.Name, p, kubeletDir)
		}
	}
	// The state records survive restarts only on the host.
	stateDir := args["state-dir"]
	if stateDir == "" {
		stateDir = loadPluginFlags(t)["state-dir"]
	}
	if v, _, _, err := resolve(w.spec, plugin, stateDir); err != nil || v.HostPath == nil {
		t.Errorf("node plugin: --state-dir %q must be on a hostPath volume (%v)", stateDir, err)
	}
	// Key files never reach a disk: --key-dir is a memory-backed emptyDir.
	if v, _, _, err := resolve(w.spec, plugin, args["key-dir"]); err != nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("node plugin: --key-dir %q must be on an emptyDir with medium Memory (%v)", args["key-dir"], err)
	}
	// Bidirectional propagation is only allowed in privileged containers.
	for _, c := range w.spec.Containers {
		for _, mnt := range c.VolumeMounts {
			if mnt.MountPropagation != nil && *mnt.MountPropagation == corev1.MountPropagationBidirectional && !privileged(c) {
				t.Errorf("%s: Bidirectional mount %s in an unprivileged container", c.Name, mnt.MountPath)
			}
		}
	}
}
