//go:build helm

// The Helm chart's tests. They need the helm binary, so they are built
// only with the helm tag and run by `make helm-test`, which builds helm
// and passes its path in RBDCSI_HELM.

package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/yaml"
)

// How the tests run helm, relative to this package.
const (
	helmChart       = "helm/rbdcsi"
	helmValuesDir   = "helm/values"
	helmRelease     = "rbdcsi"
	helmNamespace   = "rbdcsi"
	helmKubeVersion = "1.37.1"
)

// helmBinary is the helm that `make helm-test` pinned. Without it the
// tests fail rather than skip: a skipped chart test would pass CI silently.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RBDCSI_HELM")
	if bin == "" {
		t.Fatal("RBDCSI_HELM is not set: run `make helm-test`, which builds helm and sets it")
	}
	return bin
}

// runHelm runs helm with args (no shell) and returns its stdout and its
// stderr; err is non-nil when helm exits non-zero.
func runHelm(t *testing.T, args ...string) (stdout []byte, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	// runs: $RBDCSI_E2E_CACHE/bin/helm (built by scripts/k8s-build.sh), through $RBDCSI_HELM
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.String(), err
}

// helmCRDKinds are the kinds of CRDs the chart's objects need, which
// `helm install` finds in the cluster and `helm template` is told of.
var helmCRDKinds = []string{"snapshot.storage.k8s.io/v1/VolumeSnapshotClass", "monitoring.coreos.com/v1/ServiceMonitor",
	"cbt.storage.k8s.io/v1beta1/SnapshotMetadataService", "csiaddons.openshift.io/v1alpha1/CSIAddonsNode"}

// helmTemplate renders the chart as release rbdcsi in namespace rbdcsi
// with the value files in order (later ones override earlier ones), for a
// cluster with the CRDs the chart may need.
func helmTemplate(t *testing.T, valueFiles ...string) ([]byte, string, error) {
	t.Helper()
	return helmTemplateFor(t, helmCRDKinds, valueFiles...)
}

// helmTemplateFor renders as helmTemplate does, for a cluster that has the
// CRD kinds given (group/version/Kind) beside the built-in ones.
func helmTemplateFor(t *testing.T, crdKinds []string, valueFiles ...string) ([]byte, string, error) {
	t.Helper()
	args := []string{"template", helmRelease, helmChart, "-n", helmNamespace, "--kube-version", helmKubeVersion}
	for _, k := range crdKinds {
		args = append(args, "--api-versions", k)
	}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	return runHelm(t, args...)
}

// helmValueFiles lists the test matrix's value files.
func helmValueFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(helmValuesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no value files in %s (%v)", helmValuesDir, err)
	}
	return files
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart sets. Its CRD types are not a dependency of this module, so
// strict decoding into this struct stands in for the scheme.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one `helm template` output, decoded, and the name its
// objects share (app.kubernetes.io/name: nameOverride, or the chart's).
type rendered struct {
	*manifests
	monitors []serviceMonitor
	name     string
}

var helmSource = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// renderValues renders with the value files and decodes every document as
// strictly as loadAll decodes the manifest files; any failure stops t.
func renderValues(t *testing.T, valueFiles ...string) *rendered {
	t.Helper()
	out, stderr, err := helmTemplate(t, valueFiles...)
	if err != nil {
		t.Fatalf("helm template -f %s: %v\n%s", strings.Join(valueFiles, " -f "), err, stderr)
	}
	where := filepath.Base(valueFiles[len(valueFiles)-1])
	fileOf := func(doc []byte) string {
		if m := helmSource.FindSubmatch(doc); m != nil {
			return where + ":" + string(m[1])
		}
		return where
	}
	r := &rendered{manifests: &manifests{}, name: "rbdcsi"}
	for _, f := range valueFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			NameOverride string `json:"nameOverride"`
		}
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if v.NameOverride != "" {
			r.name = v.NameOverride
		}
	}
	// ServiceMonitors are not in the scheme: decoded on their own.
	takeMonitor := func(file string, i int, doc []byte) bool {
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind != "ServiceMonitor" || tm.APIVersion != "monitoring.coreos.com/v1" {
			return false // a bad document fails in the strict decode
		}
		var sm serviceMonitor
		if err := yaml.UnmarshalStrict(doc, &sm); err != nil {
			t.Errorf("%s#%d: %v", file, i, err)
		}
		r.monitors = append(r.monitors, sm)
		return true
	}
	r.objects = decodeDocuments(t, strictDecoder(newScheme(t)), out, fileOf, takeMonitor)
	if t.Failed() {
		t.FailNow()
	}
	return r
}

// TestHelmLintStrict: `helm lint --strict` passes with every value file
// (--strict turns lint warnings into failures).
func TestHelmLintStrict(t *testing.T) {
	for _, f := range helmValueFiles(t) {
		out, stderr, err := runHelm(t, "lint", "--strict", "--kube-version", helmKubeVersion, helmChart, "-f", f)
		if err != nil {
			t.Errorf("helm lint --strict -f %s: %v\n%s%s", f, err, out, stderr)
		}
	}
}

// TestHelmTemplateDecodesStrictly renders every value file, decodes each
// object into its API type with unknown fields refused, and checks what
// the plain manifests' tests check: plugin flags, pinned images, labels,
// StorageClass and VolumeAttributesClass parameters the driver takes, no
// Ceph Secret named by a class or readable by the sidecars (only the KEK
// Secrets: the controller's and the encrypted classes').
func TestHelmTemplateDecodesStrictly(t *testing.T) {
	helmBinary(t) // before the plugin build, which takes a while
	flags := loadPluginFlags(t)
	files := helmValueFiles(t)
	for name := range helmSanity {
		if !slices.Contains(files, filepath.Join(helmValuesDir, name)) {
			t.Errorf("helmSanity checks %s, which is not in %s", name, helmValuesDir)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := renderValues(t, f)
			if checkPluginFlags(t, f, workloads(r.manifests), flags) == 0 {
				t.Error("no rbdplugin container rendered")
			}
			checkPinnedImages(t, r)
			checkHelmLabels(t, r)
			checkReferences(t, r)
			checkClassParams(t, r)
			checkClassesSecrets(t, r.manifests)
			checkSecretReader(t, r.manifests)
			checkServiceMonitors(t, r)
			if check := helmSanity[filepath.Base(f)]; check != nil {
				check(t, r)
			}
		})
	}
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// pinnedImage: a digest, or a tag other than latest. An unpinned image
// would change under a running release at the next pull.
func pinnedImage(image string) bool {
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return sha256Digest.MatchString(digest)
	}
	_, tag := imageRepo(image)
	return tag != "" && tag != "latest"
}

func checkPinnedImages(t *testing.T, r *rendered) {
	t.Helper()
	for _, w := range workloads(r.manifests) {
		for _, c := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
			if !pinnedImage(c.Image) {
				t.Errorf("%s/%s: image %q is not pinned by a digest or a tag other than latest", w.name, c.Name, c.Image)
			}
		}
	}
}

// checkHelmLabels: every object carries the name the manifests share and
// Helm's managed-by, so `kubectl get -l` finds all of a release.
func checkHelmLabels(t *testing.T, r *rendered) {
	t.Helper()
	want := map[string]string{"app.kubernetes.io/name": r.name, "app.kubernetes.io/managed-by": "Helm"}
	check := func(where string, labels map[string]string) {
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", where, k, labels[k], v)
			}
		}
	}
	for _, o := range r.objects {
		m, err := meta.Accessor(o.obj)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		check(o.String(), m.GetLabels())
	}
	for _, sm := range r.monitors {
		check("ServiceMonitor "+sm.Metadata.Namespace+"/"+sm.Metadata.Name, sm.Metadata.Labels)
	}
}

// checkServiceMonitors: each ServiceMonitor selects the metrics Service of
// its namespace and names one of its ports, or Prometheus scrapes nothing.
func checkServiceMonitors(t *testing.T, r *rendered) {
	t.Helper()
	svcs, _ := all[*corev1.Service](r.manifests)
	for _, sm := range r.monitors {
		where := "ServiceMonitor " + sm.Metadata.Namespace + "/" + sm.Metadata.Name
		sel := sm.Spec.Selector.MatchLabels
		if len(sel) == 0 {
			t.Errorf("%s: empty selector matches every Service", where)
			continue
		}
		var matched []*corev1.Service
		for _, s := range svcs {
			if s.Namespace == sm.Metadata.Namespace && subset(sel, s.Labels) {
				matched = append(matched, s)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s: selector %v matches %d Services in its namespace, want 1", where, sel, len(matched))
			continue
		}
		if len(sm.Spec.Endpoints) == 0 {
			t.Errorf("%s: no endpoints", where)
		}
		for _, e := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(matched[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
				t.Errorf("%s: port %q is not a port of Service %s", where, e.Port, matched[0].Name)
			}
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestHelmRendersDeploySite: with helm/values/site.yaml the chart renders
// exactly the objects an install with kustomize applies (deploy/site as
// shipped, and deploy/snapshotclass; less the release namespace, which
// exists before `helm install`), field for field. This is what keeps the
// chart and the plain manifests from drifting apart.
func TestHelmRendersDeploySite(t *testing.T) {
	values := filepath.Join(helmValuesDir, "site.yaml")
	want := comparableObjects(t, installed(t), false)
	if len(want) == 0 {
		t.Fatal("no objects in deploy/site's build")
	}
	for _, p := range compareObjects(want, comparableObjects(t, renderValues(t, values).manifests, true)) {
		t.Error(p)
	}
	t.Logf("compared %d objects", len(want))
	// The comparator must notice a change, a missing object and an extra
	// one; each overlay below makes one.
	t.Run("detects drift", func(t *testing.T) {
		for overlay, wantProblem := range map[string]string{
			"controller: {logLevel: 3}":                                      "Deployment rbdcsi/rbdcsi-controller: spec.template.spec.containers[0].args[",
			"metrics: {enabled: false}":                                      "Service rbdcsi/rbdcsi-controller-metrics: not rendered",
			"volumeAttributesClasses: [{name: x, parameters: {maxIops: 1}}]": "VolumeAttributesClass /x: rendered, but not in deploy/site's build",
		} {
			file := filepath.Join(t.TempDir(), "drift.yaml")
			if err := os.WriteFile(file, []byte(overlay+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			problems := compareObjects(want, comparableObjects(t, renderValues(t, values, file).manifests, true))
			t.Logf("overlay %q:\n%s", overlay, strings.Join(problems, "\n"))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, wantProblem) }) {
				t.Errorf("overlay %q: no problem containing %q (the problems are logged above)", overlay, wantProblem)
			}
		}
	})
}

// Labels only Helm's render carries: they name the release and chart
// version, which plain manifests have no use for.
var helmOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// comparableObjects turns m into plain JSON values keyed by kind
// namespace/name; fromHelm marks the chart's side.
func comparableObjects(t *testing.T, m *manifests, fromHelm bool) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range m.objects {
		acc, err := meta.Accessor(o.obj)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if !fromHelm && o.gvk.Kind == "Namespace" && acc.GetName() == helmNamespace {
			continue // the release namespace: made before `helm install`
		}
		key := o.gvk.Kind + " " + acc.GetNamespace() + "/" + acc.GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s twice", o, key)
		}
		out[key] = plainObject(t, o, fromHelm)
	}
	return out
}

// plainObject is o as JSON values, less what may differ without meaning
// anything. The round trip through the typed object makes equal-meaning
// YAML compare equal (0440 and 288, quoted and bare numbers).
func plainObject(t *testing.T, o object, fromHelm bool) map[string]any {
	t.Helper()
	obj := o.obj
	// A Secret's stringData is data once applied, as the API server keeps it.
	if s, ok := obj.(*corev1.Secret); ok && len(s.StringData) > 0 {
		s = s.DeepCopy()
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
		obj = s
	}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	md, _ := v["metadata"].(map[string]any)
	if labels, ok := md["labels"].(map[string]any); ok && fromHelm {
		for _, l := range helmOnlyLabels {
			delete(labels, l)
		}
	}
	// The chart writes the cluster map compact, the file pretty.
	if d, ok := v["data"].(map[string]any); ok && o.gvk.Kind == "ConfigMap" {
		for k, s := range d {
			if strings.HasSuffix(k, ".json") {
				var parsed any
				if err := json.Unmarshal([]byte(s.(string)), &parsed); err != nil {
					t.Fatalf("%s: data %s: %v", o, k, err)
				}
				d[k] = parsed
			}
		}
	}
	return v
}

// compareObjects lists, sorted, every object only one side has and every
// field path where the two differ.
func compareObjects(files, chart map[string]map[string]any) []string {
	var problems []string
	for key, f := range files {
		c, ok := chart[key]
		if !ok {
			problems = append(problems, key+": not rendered by the chart")
			continue
		}
		if !reflect.DeepEqual(f, c) {
			var diffs []string
			diffPaths("", f, c, &diffs)
			problems = append(problems, key+": "+strings.Join(diffs, "\n\t"+key+": "))
		}
	}
	for key := range chart {
		if _, ok := files[key]; !ok {
			problems = append(problems, key+": rendered, but not in deploy/site's build")
		}
	}
	sort.Strings(problems)
	return problems
}

// diffPaths appends "path: file has X, chart has Y" for each leaf where a
// (deploy/site's build) and b (the chart) differ.
func diffPaths(at string, a, b any, out *[]string) {
	switch a := a.(type) {
	case map[string]any:
		if b, ok := b.(map[string]any); ok {
			keys := slices.Collect(maps.Keys(a))
			for k := range b {
				if _, ok := a[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				diffPaths(strings.TrimPrefix(at+"."+k, "."), a[k], b[k], out)
			}
			return
		}
	case []any:
		if b, ok := b.([]any); ok {
			for i := range max(len(a), len(b)) {
				var x, y any
				if i < len(a) {
					x = a[i]
				}
				if i < len(b) {
					y = b[i]
				}
				diffPaths(fmt.Sprintf("%s[%d]", at, i), x, y, out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: deploy/site has %s, chart has %s", at, compact(a), compact(b)))
	}
}

func compact(v any) string {
	if v == nil {
		return "nothing"
	}
	data, _ := json.Marshal(v)
	return string(data)
}
