//go:build helm

// What the chart does at install beyond rendering its values: the CRDs it
// checks for, the names it gives its objects, the first install its README
// shows serving the examples, and the e2e's install.

package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// writeValues writes values into a file of a test directory.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestHelmChecksCRDs: in a cluster without the VolumeSnapshot CRDs,
// `helm install` stops with a message that says what to do, before any
// object is made, instead of failing part-way on the VolumeSnapshotClass;
// volumeSnapshotClasses: [] installs without. The same for ServiceMonitors
// and the Prometheus Operator's CRDs, and for changed-block tracking and
// the SnapshotMetadataService CRD. (helm lint renders as neither an
// install nor an upgrade, and passes without them: TestHelmLintStrict.)
func TestHelmChecksCRDs(t *testing.T) {
	site := filepath.Join(helmValuesDir, "site.yaml")
	_, stderr, err := helmTemplateFor(t, nil, site)
	if err == nil || !strings.Contains(stderr, "the VolumeSnapshot CRDs are not installed in this cluster") ||
		!strings.Contains(stderr, "volumeSnapshotClasses: []") {
		t.Errorf("without the VolumeSnapshot CRDs: %v, want the chart's message naming them and volumeSnapshotClasses: []\n%s", err, stderr)
	}
	t.Logf("helm says: %s", strings.TrimSpace(stderr))

	out, stderr, err := helmTemplateFor(t, nil, site, writeValues(t, "volumeSnapshotClasses: []"))
	if err != nil {
		t.Fatalf("volumeSnapshotClasses: [] without the CRDs: %v\n%s", err, stderr)
	}
	if strings.Contains(string(out), "kind: VolumeSnapshotClass") {
		t.Error("volumeSnapshotClasses: [] rendered a VolumeSnapshotClass")
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](renderValues(t, site).manifests)
	if len(vscs) != 1 {
		t.Errorf("with the CRDs: %d VolumeSnapshotClasses, want 1", len(vscs))
	}

	monitors := writeValues(t, "metrics: {serviceMonitor: {enabled: true}}")
	_, stderr, err = helmTemplateFor(t, helmCRDKinds[:1], site, monitors)
	if err == nil || !strings.Contains(stderr, "the Prometheus Operator's CRDs are not installed") {
		t.Errorf("ServiceMonitors without their CRDs: %v, want the chart's message\n%s", err, stderr)
	}

	cbt := writeValues(t, "snapshotMetadata: {enabled: true}")
	_, stderr, err = helmTemplateFor(t, helmCRDKinds[:2], site, cbt)
	if err == nil || !strings.Contains(stderr, "the SnapshotMetadataService CRD is not installed") {
		t.Errorf("snapshotMetadata without its CRD: %v, want the chart's message\n%s", err, stderr)
	}
	if _, stderr, err = helmTemplateFor(t, helmCRDKinds, site, cbt); err != nil {
		t.Errorf("snapshotMetadata with its CRD: %v\n%s", err, stderr)
	}
}

// TestHelmNames: object names follow the release, as charts do (release
// rbdcsi: rbdcsi-controller; release storage: storage-rbdcsi-controller;
// fullnameOverride: its value), and every reference between the objects
// follows too.
func TestHelmNames(t *testing.T) {
	site := filepath.Join(helmValuesDir, "site.yaml")
	for _, tc := range []struct{ release, values, controller, name string }{
		{"rbdcsi", "", "rbdcsi-controller", "rbdcsi"},
		{"storage", "", "storage-rbdcsi-controller", "rbdcsi"},
		{"storage", "nameOverride: ceph", "storage-ceph-controller", "ceph"},
		{"storage", "fullnameOverride: ceph-rbd", "ceph-rbd-controller", "rbdcsi"},
	} {
		t.Run(tc.release+"/"+tc.values, func(t *testing.T) {
			args := []string{"template", tc.release, helmChart, "-n", helmNamespace, "--kube-version", helmKubeVersion, "-f", site}
			for _, k := range helmCRDKinds {
				args = append(args, "--api-versions", k)
			}
			if tc.values != "" {
				args = append(args, "-f", writeValues(t, tc.values))
			}
			out, stderr, err := runHelm(t, args...)
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
			}
			r := &rendered{manifests: &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), out,
				func([]byte) string { return tc.release }, nil)}, name: tc.name}
			if d := only[*appsv1.Deployment](t, r.manifests, "Deployment"); d.Name != tc.controller {
				t.Errorf("the controller Deployment is %s, want %s", d.Name, tc.controller)
			}
			checkHelmLabels(t, r)
			checkReferences(t, r)
		})
	}
}

// checkReferences: what each object names exists among the rendered ones
// (or is made before the install: the Secrets the chart does not make):
// the workloads' service accounts and ConfigMaps, the bindings' roles and
// subjects, and the Services' pods.
func checkReferences(t *testing.T, r *rendered) {
	t.Helper()
	m := r.manifests
	sas, _ := all[*corev1.ServiceAccount](m)
	cms, _ := all[*corev1.ConfigMap](m)
	roles, _ := all[*rbacv1.Role](m)
	croles, _ := all[*rbacv1.ClusterRole](m)
	rbs, _ := all[*rbacv1.RoleBinding](m)
	crbs, _ := all[*rbacv1.ClusterRoleBinding](m)
	svcs, _ := all[*corev1.Service](m)
	ws := workloads(m)
	for _, w := range ws {
		if sa := w.spec.ServiceAccountName; findNamed(sas, w.namespace, sa) == nil {
			t.Errorf("%s: service account %s/%s is not rendered", w.name, w.namespace, sa)
		}
		for _, v := range w.spec.Volumes {
			if v.ConfigMap != nil && findNamed(cms, w.namespace, v.ConfigMap.Name) == nil {
				t.Errorf("%s: ConfigMap %s/%s is not rendered", w.name, w.namespace, v.ConfigMap.Name)
			}
		}
	}
	subjects := func(what string, ss []rbacv1.Subject) {
		for _, s := range ss {
			if s.Kind == rbacv1.ServiceAccountKind && findNamed(sas, s.Namespace, s.Name) == nil {
				t.Errorf("%s: subject %s/%s is not a rendered service account", what, s.Namespace, s.Name)
			}
		}
	}
	for _, b := range rbs {
		if findNamed(roles, b.Namespace, b.RoleRef.Name) == nil {
			t.Errorf("RoleBinding %s/%s: Role %s is not rendered", b.Namespace, b.Name, b.RoleRef.Name)
		}
		subjects("RoleBinding "+b.Name, b.Subjects)
	}
	for _, b := range crbs {
		if findNamed(croles, "", b.RoleRef.Name) == nil {
			t.Errorf("ClusterRoleBinding %s: ClusterRole %s is not rendered", b.Name, b.RoleRef.Name)
		}
		subjects("ClusterRoleBinding "+b.Name, b.Subjects)
	}
	for _, s := range svcs {
		if !slices.ContainsFunc(ws, func(w workload) bool {
			return w.namespace == s.Namespace && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.labels))
		}) {
			t.Errorf("Service %s/%s: selector %v matches no rendered pod", s.Namespace, s.Name, s.Spec.Selector)
		}
	}
}

// TestHelmMinimalServesTheExamples: the install the chart's README shows
// (helm/values/minimal.yaml) makes every class the examples' claims and
// snapshots ask for, unless the example brings it itself.
func TestHelmMinimalServesTheExamples(t *testing.T) {
	r := renderValues(t, filepath.Join(helmValuesDir, "minimal.yaml"))
	ex := loadAll(t).inDir(examplesDir)
	classes := map[string]bool{"": true} // "": a static PV's claim
	for _, m := range []*manifests{r.manifests, ex} {
		scs, _ := all[*storagev1.StorageClass](m)
		for _, sc := range scs {
			classes[sc.Name] = true
		}
	}
	pvcs, from := all[*corev1.PersistentVolumeClaim](ex)
	for i, p := range pvcs {
		if p.Spec.StorageClassName == nil || !classes[*p.Spec.StorageClassName] {
			t.Errorf("%s: claim %s asks for StorageClass %s, which the minimal install does not make", from[i].file, p.Name, fmtPtr(p.Spec.StorageClassName))
		}
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](r.manifests)
	snaps, from := all[*snapv1.VolumeSnapshot](ex)
	for i, s := range snaps {
		if s.Spec.VolumeSnapshotClassName == nil || findNamed(vscs, "", *s.Spec.VolumeSnapshotClassName) == nil {
			t.Errorf("%s: snapshot %s asks for VolumeSnapshotClass %s, which the minimal install does not make", from[i].file, s.Name, fmtPtr(s.Spec.VolumeSnapshotClassName))
		}
	}
}

// TestHelmE2EValues renders the e2e's Helm install as make e2e runs
// docs/install.md's Helm path: the values the guide writes, then
// deploy/e2e/helm-values.yaml (the guide's HELM_VALUES). The namespaces
// and Secrets are the guide's, made before; no image or pull policy
// changes (the e2e imports the images under the chart's names); the
// machine's flags are there.
func TestHelmE2EValues(t *testing.T) {
	guide := writeValues(t, `clusters:
  - clusterID: ceph1
    monitors: ["v2:198.18.77.1:3300"]
pool: rbd
images:
  plugin: {repository: docker.io/rbdcsi/rbdplugin, tag: v0.0.0-e2e.test}`)
	plain := renderValues(t, guide)
	r := renderValues(t, guide, filepath.Join(e2eDir, "helm-values.yaml"))
	for key := range r.keys() {
		if strings.HasPrefix(key, "Namespace ") || strings.HasPrefix(key, "Secret ") {
			t.Errorf("the e2e's install makes %s, which the guide makes before it", key)
		}
	}
	shipped := map[string]corev1.Container{}
	for _, w := range workloads(plain.manifests) {
		for _, c := range w.spec.Containers {
			shipped[w.name+"/"+c.Name] = c
		}
	}
	for _, w := range workloads(r.manifests) {
		for _, c := range w.spec.Containers {
			want, ok := shipped[w.name+"/"+c.Name]
			if !ok || c.Image != want.Image || c.ImagePullPolicy != want.ImagePullPolicy {
				t.Errorf("%s/%s: image %s (pull %s), want the chart's %s (pull %s)", w.name, c.Name, c.Image, c.ImagePullPolicy, want.Image, want.ImagePullPolicy)
			}
		}
		if got := mustFlags(t, pluginContainer(t, w.spec))["node-registry"]; got != "ceph1/rbd" {
			t.Errorf("%s: --node-registry=%s, want ceph1/rbd", w.name, got)
		}
	}
	checkPluginArgs(t, "the e2e's Helm install: the node plugin", nodePlugin(t, r.manifests),
		"--domain-labels=topology.kubernetes.io/zone", "--default-mounter=fuse", "--registration-dir=/registration")
	checkPluginArgs(t, "the e2e's Helm install: the controller plugin", controllerPlugin(t, r.manifests), "--health-address=:9808")
}
