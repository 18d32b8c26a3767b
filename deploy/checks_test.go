package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// kubeletPluginsDir is where kubelet expects CSI sockets and
// kubeletRegistryDir where it watches for registration sockets.
const (
	kubeletDir         = "/var/lib/kubelet"
	kubeletPluginsDir  = kubeletDir + "/plugins"
	kubeletRegistryDir = kubeletDir + "/plugins_registry"
)

// The downward-API values used to expand $(VAR) in args.
var fieldValues = map[string]string{"spec.nodeName": "node-1"}

// TestOneDriverName: the CSIDriver, the StorageClasses, the
// VolumeSnapshotClass, every plugin container's --drivername, the kubelet
// plugin directory and the binary's default all name the same driver.
func TestOneDriverName(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	drivers, _ := all[*storagev1.CSIDriver](m)
	if len(drivers) != 1 {
		t.Fatalf("%d CSIDriver objects, want 1", len(drivers))
	}
	name := drivers[0].Name

	if def := loadPluginFlags(t)["drivername"]; def != name {
		t.Errorf("rbdplugin --drivername defaults to %q, the CSIDriver is %q", def, name)
	}
	scs, _ := all[*storagev1.StorageClass](m)
	for _, sc := range scs {
		if sc.Provisioner != name {
			t.Errorf("StorageClass %s: provisioner %q, want %q", sc.Name, sc.Provisioner, name)
		}
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, vsc := range vscs {
		if vsc.Driver != name {
			t.Errorf("VolumeSnapshotClass %s: driver %q, want %q", vsc.Name, vsc.Driver, name)
		}
	}
	if len(scs) == 0 || len(vscs) == 0 {
		t.Errorf("want StorageClasses and a VolumeSnapshotClass, got %d and %d", len(scs), len(vscs))
	}
	for _, w := range workloads(m) {
		for _, c := range containers(w.spec, pluginRepo) {
			if got, ok := mustFlags(t, c)["drivername"]; ok && got != name {
				t.Errorf("%s/%s: --drivername=%s, want %s", w.name, c.Name, got, name)
			}
		}
		// The node plugin's socket directory is named after the driver.
		for _, v := range w.spec.Volumes {
			if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, kubeletPluginsDir+"/") &&
				path.Dir(path.Clean(v.HostPath.Path)) == kubeletPluginsDir && path.Base(v.HostPath.Path) != name {
				t.Errorf("%s: volume %s: hostPath %s is not %s/%s", w.name, v.Name, v.HostPath.Path, kubeletPluginsDir, name)
			}
		}
	}
}

// TestCSIDriverSpec pins the CSIDriver fields the driver relies on.
func TestCSIDriverSpec(t *testing.T) {
	drivers, _ := all[*storagev1.CSIDriver](loadAll(t).inDir(kubernetesDir))
	for _, d := range drivers {
		s := d.Spec
		if s.AttachRequired == nil || !*s.AttachRequired {
			t.Errorf("CSIDriver %s: attachRequired must be true (ControllerPublish records attachments)", d.Name)
		}
		if s.PodInfoOnMount == nil || *s.PodInfoOnMount {
			t.Errorf("CSIDriver %s: podInfoOnMount must be false", d.Name)
		}
		if s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
			t.Errorf("CSIDriver %s: fsGroupPolicy must be File", d.Name)
		}
		if !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
			t.Errorf("CSIDriver %s: volumeLifecycleModes = %v, want [Persistent]", d.Name, s.VolumeLifecycleModes)
		}
	}
}

// TestSocketPaths: in every pod the plugin listens where each sidecar
// connects, on a volume they share; the registrar tells kubelet the host
// path of that same socket and registers in kubelet's registry.
func TestSocketPaths(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	ws := workloads(m)
	if len(ws) != 2 {
		t.Fatalf("%d workloads, want the controller Deployment and the node DaemonSet", len(ws))
	}
	for _, w := range ws {
		plugin := oneContainer(t, w, pluginRepo)
		endpoint, err := unixPath(mustFlags(t, plugin)["endpoint"])
		if err != nil {
			t.Fatalf("%s: plugin --endpoint: %v", w.name, err)
		}
		sockVol, _, sockRel, err := resolve(w.spec, plugin, endpoint)
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if sockVol.EmptyDir == nil && sockVol.HostPath == nil {
			t.Errorf("%s: the socket is on volume %s, neither an emptyDir nor a hostPath", w.name, sockVol.Name)
		}
		clients := 0
		for _, c := range w.spec.Containers {
			addr, ok := mustFlags(t, c)["csi-address"]
			if !ok {
				continue
			}
			clients++
			p, err := unixPath(addr)
			if err != nil {
				t.Errorf("%s/%s: --csi-address: %v", w.name, c.Name, err)
				continue
			}
			v, _, rel, err := resolve(w.spec, c, p)
			if err != nil {
				t.Errorf("%s: %v", w.name, err)
				continue
			}
			if v.Name != sockVol.Name || rel != sockRel {
				t.Errorf("%s/%s: --csi-address=%s is %s:%s, the plugin listens on %s:%s",
					w.name, c.Name, addr, v.Name, rel, sockVol.Name, sockRel)
			}
		}
		// Every container but the plugin talks to it.
		if clients != len(w.spec.Containers)-1 {
			t.Errorf("%s: %d of %d sidecars have --csi-address", w.name, clients, len(w.spec.Containers)-1)
		}

		for _, reg := range containers(w.spec, registrarRepo) {
			if sockVol.HostPath == nil {
				t.Fatalf("%s: kubelet cannot reach a socket on non-hostPath volume %s", w.name, sockVol.Name)
			}
			hostSock := path.Join(sockVol.HostPath.Path, sockRel)
			if got := mustFlags(t, reg)["kubelet-registration-path"]; got != hostSock {
				t.Errorf("%s/%s: --kubelet-registration-path=%s, the plugin's socket is %s on the host", w.name, reg.Name, got, hostSock)
			}
			if !strings.HasPrefix(hostSock, kubeletPluginsDir+"/") {
				t.Errorf("%s: the plugin socket %s is not under %s", w.name, hostSock, kubeletPluginsDir)
			}
			// The registrar creates its socket in /registration.
			v, _, rel, err := resolve(w.spec, reg, "/registration")
			if err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if v.HostPath == nil || path.Clean(path.Join(v.HostPath.Path, rel)) != kubeletRegistryDir {
				t.Errorf("%s/%s: /registration is not the host's %s", w.name, reg.Name, kubeletRegistryDir)
			}
		}
	}
}

// TestControllerDeployment: two replicas, every sidecar elects a leader,
// plugin in controller mode, all sidecars present.
func TestControllerDeployment(t *testing.T) {
	deps, _ := all[*appsv1.Deployment](loadAll(t).inDir(kubernetesDir))
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	d := deps[0]
	w := workloads(&manifests{objects: []object{{obj: d}}})[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("controller replicas = %s, want 2", fmtPtr(d.Spec.Replicas))
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("controller selector does not match its pod template: %v", err)
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
	dss, _ := all[*appsv1.DaemonSet](loadAll(t).inDir(kubernetesDir))
	if len(dss) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(dss))
	}
	ds := dss[0]
	w := workloads(&manifests{objects: []object{{obj: ds}}})[0]
	if !w.spec.HostNetwork {
		t.Error("node pod: hostNetwork must be true")
	}
	if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("node selector does not match its pod template: %v", err)
	}
	plugin := oneContainer(t, w, pluginRepo)
	if sc := plugin.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
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
		{kubeletDir, kubeletDir, false, corev1.MountPropagationBidirectional},
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
	// The state records survive restarts only on the host.
	stateDir := args["state-dir"]
	if stateDir == "" {
		stateDir = loadPluginFlags(t)["state-dir"]
	}
	if v, _, _, err := resolve(w.spec, plugin, stateDir); err != nil || v.HostPath == nil {
		t.Errorf("node plugin: --state-dir %q must be on a hostPath volume (%v)", stateDir, err)
	}
	// Bidirectional propagation is only allowed in privileged containers.
	for _, c := range w.spec.Containers {
		for _, mnt := range c.VolumeMounts {
			if mnt.MountPropagation != nil && *mnt.MountPropagation == corev1.MountPropagationBidirectional &&
				(c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged) {
				t.Errorf("%s: Bidirectional mount %s in an unprivileged container", c.Name, mnt.MountPath)
			}
		}
	}
}

// TestHealthAndMetricsWiring: the plugin's livenessProbe asks the
// livenessprobe sidecar's port; --metrics-address is the port named
// "metrics"; the sidecars' probes hit their own --http-endpoint; no two
// listeners share a port in a pod; Services select the pods and name their
// ports.
func TestHealthAndMetricsWiring(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	ws := workloads(m)
	for _, w := range ws {
		plugin := oneContainer(t, w, pluginRepo)
		liveness := oneContainer(t, w, livenessRepo)

		listening := map[int32]string{} // port -> container
		listen := func(c corev1.Container, flag string) int32 {
			addr, ok := mustFlags(t, c)[flag]
			if !ok {
				return 0
			}
			port, err := listenPort(addr)
			if err != nil {
				t.Errorf("%s/%s: --%s=%s: %v", w.name, c.Name, flag, addr, err)
				return 0
			}
			if other, dup := listening[port]; dup {
				t.Errorf("%s: %s and %s both listen on port %d", w.name, other, c.Name, port)
			}
			listening[port] = c.Name
			return port
		}
		healthz := listen(liveness, "http-endpoint")
		if healthz == 0 {
			t.Errorf("%s/%s: needs --http-endpoint", w.name, liveness.Name)
		}
		metricsPort := listen(plugin, "metrics-address")
		for _, c := range w.spec.Containers {
			if c.Name == plugin.Name || c.Name == liveness.Name {
				continue
			}
			if p := listen(c, "http-endpoint"); p != 0 && c.LivenessProbe != nil {
				got, _, err := probePort(c, c.LivenessProbe)
				if err != nil || got != p {
					t.Errorf("%s/%s: livenessProbe port %d, --http-endpoint port %d (%v)", w.name, c.Name, got, p, err)
				}
			}
		}

		got, probePath, err := probePort(plugin, plugin.LivenessProbe)
		if err != nil {
			t.Errorf("%s: plugin: %v", w.name, err)
		} else if got != healthz || probePath != "/healthz" {
			t.Errorf("%s: plugin livenessProbe is %s on port %d; the livenessprobe sidecar serves /healthz on %d", w.name, probePath, got, healthz)
		}

		if metricsPort == 0 {
			t.Errorf("%s: plugin has no --metrics-address", w.name)
		} else if p, err := containerPort(plugin, "metrics", 0); err != nil || p != metricsPort {
			t.Errorf("%s: plugin port \"metrics\" is %d, --metrics-address port is %d (%v)", w.name, p, metricsPort, err)
		}

		names := map[string]bool{}
		for _, c := range w.spec.Containers {
			for _, p := range c.Ports {
				if p.Name == "" || names[p.Name] {
					t.Errorf("%s/%s: port %d has an empty or repeated name %q", w.name, c.Name, p.ContainerPort, p.Name)
				}
				names[p.Name] = true
				if _, ok := listening[p.ContainerPort]; !ok {
					t.Errorf("%s/%s: declares port %d (%s), which nothing listens on", w.name, c.Name, p.ContainerPort, p.Name)
				}
			}
		}
	}

	svcs, _ := all[*corev1.Service](m)
	if len(svcs) == 0 {
		t.Error("no Service exposes the metrics")
	}
	for _, svc := range svcs {
		var matched *workload
		for i := range ws {
			if ws[i].namespace == svc.Namespace && len(svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ws[i].labels)) {
				if matched != nil {
					t.Errorf("Service %s selects both %s and %s", svc.Name, matched.name, ws[i].name)
				}
				matched = &ws[i]
			}
		}
		if matched == nil {
			t.Errorf("Service %s selects no workload", svc.Name)
			continue
		}
		plugin := oneContainer(t, *matched, pluginRepo)
		for _, p := range svc.Spec.Ports {
			if _, err := containerPort(plugin, p.TargetPort.String(), 0); err != nil {
				t.Errorf("Service %s port %s: %v", svc.Name, p.Name, err)
			}
		}
	}
}

// TestClusterConfigAndSecret: the plugin's --cluster-config is a key of a
// mounted ConfigMap that holds a valid cluster map, and the controller's
// --controller-secret-dir a mounted Secret with userID and userKey.
func TestClusterConfigAndSecret(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	cms, _ := all[*corev1.ConfigMap](m)
	secrets, _ := all[*corev1.Secret](m)
	defaults := loadPluginFlags(t)
	for _, w := range workloads(m) {
		plugin := oneContainer(t, w, pluginRepo)
		args := mustFlags(t, plugin)

		cfg := args["cluster-config"]
		if cfg == "" {
			cfg = defaults["cluster-config"]
		}
		v, _, rel, err := resolve(w.spec, plugin, cfg)
		if err != nil || v.ConfigMap == nil {
			t.Errorf("%s: --cluster-config %s is not in a mounted ConfigMap (%v)", w.name, cfg, err)
			continue
		}
		cm := findNamed(cms, w.namespace, v.ConfigMap.Name)
		if cm == nil {
			t.Errorf("%s: ConfigMap %s/%s is not in deploy/kubernetes", w.name, w.namespace, v.ConfigMap.Name)
			continue
		}
		data, ok := cm.Data[rel]
		if !ok {
			t.Errorf("%s: ConfigMap %s has no key %q", w.name, cm.Name, rel)
			continue
		}
		file := filepath.Join(t.TempDir(), "cluster-config.json")
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.LoadClusterMap(file); err != nil {
			t.Errorf("%s: ConfigMap %s: %v", w.name, cm.Name, err)
		}

		dir, ok := args["controller-secret-dir"]
		if !ok {
			if args["mode"] != "node" {
				t.Errorf("%s: the controller has no --controller-secret-dir", w.name)
			}
			continue
		}
		v, _, rel, err = resolve(w.spec, plugin, dir)
		if err != nil || v.Secret == nil || rel != "" {
			t.Errorf("%s: --controller-secret-dir %s is not a mounted Secret (%v)", w.name, dir, err)
			continue
		}
		s := findNamed(secrets, w.namespace, v.Secret.SecretName)
		if s == nil {
			t.Errorf("%s: Secret %s/%s is not in deploy/kubernetes", w.name, w.namespace, v.Secret.SecretName)
			continue
		}
		sdir := t.TempDir()
		for k, val := range secretData(s) {
			if err := os.WriteFile(filepath.Join(sdir, k), []byte(val), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := config.CredentialsFromDir(sdir); err != nil {
			t.Errorf("%s: Secret %s as --controller-secret-dir: %v", w.name, s.Name, err)
		}
	}
}

// sidecarParams are the StorageClass / VolumeSnapshotClass keys under
// csi.storage.k8s.io/ that the sidecars consume; any other key with that
// prefix is a typo the driver would silently ignore.
var sidecarParams = map[string]bool{
	"csi.storage.k8s.io/fstype": true,
}

func init() {
	for _, op := range []string{"provisioner", "controller-publish", "node-stage", "node-publish",
		"controller-expand", "node-expand", "controller-modify", "snapshotter", "groupsnapshotter"} {
		sidecarParams["csi.storage.k8s.io/"+op+"-secret-name"] = true
		sidecarParams["csi.storage.k8s.io/"+op+"-secret-namespace"] = true
	}
}

// TestStorageClasses: parameters are ones the driver accepts (its own
// ParseParams), every secret the driver needs is referenced and exists
// with userID/userKey, expansion is allowed, and there is one class each
// for ext4, xfs and raw block.
func TestStorageClasses(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	scs, _ := all[*storagev1.StorageClass](m)
	secrets, _ := all[*corev1.Secret](m)
	cms, _ := all[*corev1.ConfigMap](m)
	clusters := map[string]bool{}
	for _, cm := range cms {
		if data, ok := cm.Data["cluster-config.json"]; ok {
			list, err := config.ParseClusters([]byte(data))
			if err != nil {
				t.Fatalf("ConfigMap %s: %v", cm.Name, err)
			}
			for _, c := range list {
				clusters[c.ClusterID] = true
			}
		}
	}
	fsTypes := map[string]bool{}
	for _, sc := range scs {
		for k := range sc.Parameters {
			if strings.HasPrefix(k, config.ReservedPrefix) && !sidecarParams[k] {
				t.Errorf("StorageClass %s: parameter %s is no sidecar's", sc.Name, k)
			}
		}
		p, err := config.ParseParams(sc.Parameters)
		if err != nil {
			t.Errorf("StorageClass %s: the driver refuses its parameters: %v", sc.Name, err)
			continue
		}
		if !clusters[p.ClusterID] {
			t.Errorf("StorageClass %s: clusterID %s is not in the cluster map", sc.Name, p.ClusterID)
		}
		if p.FsType == "" {
			fsTypes["block"] = true
		} else {
			fsTypes[p.FsType] = true
		}
		if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
			t.Errorf("StorageClass %s: allowVolumeExpansion must be true", sc.Name)
		}
		for _, op := range []string{"provisioner", "controller-publish", "node-stage", "controller-expand"} {
			checkSecretRef(t, "StorageClass "+sc.Name, sc.Parameters, op, secrets)
		}
	}
	for _, want := range []string{"ext4", "xfs", "block"} {
		if !fsTypes[want] {
			t.Errorf("no StorageClass for %s", want)
		}
	}

	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, vsc := range vscs {
		for k := range vsc.Parameters {
			if strings.HasPrefix(k, config.ReservedPrefix) && !sidecarParams[k] {
				t.Errorf("VolumeSnapshotClass %s: parameter %s is no sidecar's", vsc.Name, k)
			}
		}
		checkSecretRef(t, "VolumeSnapshotClass "+vsc.Name, vsc.Parameters, "snapshotter", secrets)
	}
}

func checkSecretRef(t *testing.T, what string, params map[string]string, op string, secrets []*corev1.Secret) {
	t.Helper()
	name := params["csi.storage.k8s.io/"+op+"-secret-name"]
	ns := params["csi.storage.k8s.io/"+op+"-secret-namespace"]
	if name == "" || ns == "" {
		t.Errorf("%s: no %s secret (csi.storage.k8s.io/%s-secret-name and -namespace)", what, op, op)
		return
	}
	s := findNamed(secrets, ns, name)
	if s == nil {
		t.Errorf("%s: %s secret %s/%s is not in deploy/kubernetes", what, op, ns, name)
		return
	}
	if _, err := config.CredentialsFromSecrets(secretData(s)); err != nil {
		t.Errorf("%s: %s secret %s/%s: %v", what, op, ns, name, err)
	}
}

// TestNamespaces: every namespaced object is in the one Namespace the
// manifests create.
func TestNamespaces(t *testing.T) {
	m := loadAll(t).inDir(kubernetesDir)
	nss, _ := all[*corev1.Namespace](m)
	if len(nss) != 1 {
		t.Fatalf("%d Namespaces, want 1", len(nss))
	}
	ns := nss[0].Name
	for _, o := range m.objects {
		meta := o.obj.(interface {
			GetNamespace() string
		})
		switch o.obj.(type) {
		case *corev1.Namespace, *storagev1.CSIDriver, *storagev1.StorageClass, *snapv1.VolumeSnapshotClass:
			if meta.GetNamespace() != "" {
				t.Errorf("%s: cluster-scoped object with a namespace", o)
			}
		default:
			if !strings.HasPrefix(o.gvk.Kind, "Cluster") && meta.GetNamespace() != ns {
				t.Errorf("%s: namespace %q, want %q", o, meta.GetNamespace(), ns)
			}
		}
	}
}

// TestImages: every image is pinned by a tag that is not "latest"; the
// sidecars come from registry.k8s.io/sig-storage at the chosen majors, and
// the same tag is used for a sidecar everywhere.
func TestImages(t *testing.T) {
	m := loadAll(t)
	tags := map[string]string{}
	check := func(where, image string) {
		repo, tag := imageRepo(image)
		if tag == "" || tag == "latest" || strings.Contains(image, "@") {
			t.Errorf("%s: image %q must be pinned by a tag other than latest", where, image)
			return
		}
		if prev, ok := tags[repo]; ok && prev != tag {
			t.Errorf("%s: %s:%s, elsewhere :%s", where, repo, tag, prev)
		}
		tags[repo] = tag
		if major, ok := sidecarMajors[repo]; ok && !strings.HasPrefix(tag, major) {
			t.Errorf("%s: %s:%s, want a %sx tag", where, repo, tag, major)
		}
	}
	for _, w := range workloads(m) {
		for _, c := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
			check(w.name+"/"+c.Name, c.Image)
			if c.ImagePullPolicy == corev1.PullAlways {
				t.Errorf("%s/%s: imagePullPolicy Always with a pinned tag", w.name, c.Name)
			}
		}
	}
	pods, from := all[*corev1.Pod](m)
	for i, p := range pods {
		for _, c := range p.Spec.Containers {
			check(from[i].String()+"/"+c.Name, c.Image)
		}
	}
	for repo := range sidecarMajors {
		if _, ok := tags[repo]; !ok {
			t.Errorf("no container runs %s", repo)
		}
	}
}

// TestExamples: the examples use the StorageClasses and the
// VolumeSnapshotClass of deploy/kubernetes, and refer to each other
// consistently (pods to their claims, restore to the snapshot, clone to
// its source, block pods to Block claims).
func TestExamples(t *testing.T) {
	all_ := loadAll(t)
	base, ex := all_.inDir(kubernetesDir), all_.inDir(examplesDir)
	scs, _ := all[*storagev1.StorageClass](base)
	scByName := map[string]*storagev1.StorageClass{}
	for _, sc := range scs {
		scByName[sc.Name] = sc
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](base)
	pvcs, _ := all[*corev1.PersistentVolumeClaim](ex)
	snaps, _ := all[*snapv1.VolumeSnapshot](ex)
	pods, _ := all[*corev1.Pod](ex)

	pvcByName := map[string]*corev1.PersistentVolumeClaim{}
	for _, p := range pvcs {
		pvcByName[p.Name] = p
	}
	snapByName := map[string]*snapv1.VolumeSnapshot{}
	for _, s := range snaps {
		snapByName[s.Name] = s
		if s.Spec.VolumeSnapshotClassName == nil || findVSC(vscs, *s.Spec.VolumeSnapshotClassName) == nil {
			t.Errorf("VolumeSnapshot %s: class is not one of deploy/kubernetes", s.Name)
		}
		if src := s.Spec.Source.PersistentVolumeClaimName; src == nil || pvcByName[*src] == nil {
			t.Errorf("VolumeSnapshot %s: source claim is not an example", s.Name)
		}
	}

	var restore, clone, block, fs bool
	for _, p := range pvcs {
		if p.Spec.StorageClassName == nil || scByName[*p.Spec.StorageClassName] == nil {
			t.Errorf("PVC %s: storageClassName is not one of deploy/kubernetes", p.Name)
			continue
		}
		sc := scByName[*p.Spec.StorageClassName]
		isBlock := p.Spec.VolumeMode != nil && *p.Spec.VolumeMode == corev1.PersistentVolumeBlock
		if hasFs := sc.Parameters[config.ParamFsType] != ""; hasFs == isBlock {
			t.Errorf("PVC %s: volumeMode %s with StorageClass %s (fstype %q)", p.Name, fmtPtr(p.Spec.VolumeMode), sc.Name, sc.Parameters[config.ParamFsType])
		}
		block = block || isBlock
		fs = fs || !isBlock
		if ds := p.Spec.DataSource; ds != nil {
			switch {
			case ds.Kind == "VolumeSnapshot" && ds.APIGroup != nil && *ds.APIGroup == snapv1.GroupName:
				restore = true
				if snapByName[ds.Name] == nil {
					t.Errorf("PVC %s: restores snapshot %s, which is not an example", p.Name, ds.Name)
				}
			case ds.Kind == "PersistentVolumeClaim" && (ds.APIGroup == nil || *ds.APIGroup == ""):
				clone = true
				src := pvcByName[ds.Name]
				if src == nil {
					t.Errorf("PVC %s: clones %s, which is not an example", p.Name, ds.Name)
				} else if *src.Spec.StorageClassName != *p.Spec.StorageClassName {
					t.Errorf("PVC %s: a clone must use its source's StorageClass", p.Name)
				}
			default:
				t.Errorf("PVC %s: unexpected dataSource %v", p.Name, ds)
			}
		}
	}
	if !restore || !clone || !block || !fs {
		t.Errorf("examples need a restore (%v), a clone (%v), a Block (%v) and a Filesystem (%v) claim", restore, clone, block, fs)
	}

	var blockPod bool
	for _, pod := range pods {
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := pvcByName[v.PersistentVolumeClaim.ClaimName]
			if claim == nil {
				t.Errorf("Pod %s: claim %s is not an example", pod.Name, v.PersistentVolumeClaim.ClaimName)
				continue
			}
			isBlock := claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == corev1.PersistentVolumeBlock
			asDevice, asMount := false, false
			for _, c := range pod.Spec.Containers {
				for _, d := range c.VolumeDevices {
					asDevice = asDevice || d.Name == v.Name
				}
				for _, mnt := range c.VolumeMounts {
					asMount = asMount || mnt.Name == v.Name
				}
			}
			if isBlock != asDevice || isBlock == asMount {
				t.Errorf("Pod %s: claim %s (block=%v) must be used as volumeDevices for Block, volumeMounts for Filesystem", pod.Name, claim.Name, isBlock)
			}
			blockPod = blockPod || isBlock
		}
	}
	if !blockPod {
		t.Error("no example pod uses a Block claim through volumeDevices")
	}
	if _, err := os.Stat(filepath.Join(examplesDir, "expansion.md")); err != nil {
		t.Errorf("expansion walk-through: %v", err)
	}
}

func findVSC(list []*snapv1.VolumeSnapshotClass, name string) *snapv1.VolumeSnapshotClass {
	for _, v := range list {
		if v.Name == name {
			return v
		}
	}
	return nil
}

type namedObject interface {
	GetName() string
	GetNamespace() string
}

func findNamed[T namedObject](list []T, ns, name string) T {
	var zero T
	for _, o := range list {
		if o.GetName() == name && o.GetNamespace() == ns {
			return o
		}
	}
	return zero
}

// secretData merges data and stringData as the API server does.
func secretData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
