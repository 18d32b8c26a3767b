// Package manifests holds no code: its tests check the manifests under
// deploy/ against the Kubernetes API types and against the plugin binary,
// so that drift between them fails here instead of in a cluster. They run
// in deploy/ (TestMain), so the paths they name are relative to it.
package manifests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	groupsnapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

// Where the manifests are, relative to this package.
const (
	kubernetesDir = "kubernetes"
	examplesDir   = "examples"
)

// newScheme knows every kind the manifests may hold. No defaulting
// functions are registered: what is checked is what the files say.
func newScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, storagev1.AddToScheme, snapv1.AddToScheme,
		groupsnapv1.AddToScheme, addSnapshotMetadataService,
	} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// strictDecoder decodes YAML into the registered Go type, failing on
// unknown or duplicate fields and on case-mismatched field names.
func strictDecoder(s *runtime.Scheme) runtime.Decoder {
	return k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, s, s,
		k8sjson.SerializerOptions{Yaml: true, Strict: true})
}

// object is one decoded document and where it came from.
type object struct {
	file string // relative to deploy/
	doc  int    // 0-based document index in the file
	gvk  schema.GroupVersionKind
	obj  runtime.Object
}

func (o object) String() string { return fmt.Sprintf("%s#%d (%s)", o.file, o.doc, o.gvk.Kind) }

// manifests are all decoded documents under deploy/.
type manifests struct {
	objects []object
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments splits a multi-document YAML file; comment-only and empty
// documents are dropped.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) == "" {
			continue
		}
		docs = append(docs, []byte(d))
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// yamlFiles lists the .yaml/.yml files under dir (relative to deploy/).
func yamlFiles(t testing.TB, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func isKustomization(path string) bool {
	base := filepath.Base(path)
	return base == "kustomization.yaml" || base == "kustomization.yml"
}

// loadAll decodes every manifest file of the base, of deploy/snapshotclass
// and of the examples strictly; any failure fails t. What an install
// applies, with the objects deploy/site generates, is installed's.
func loadAll(t *testing.T) *manifests {
	t.Helper()
	s := newScheme(t)
	dec := strictDecoder(s)
	m := &manifests{}
	for _, dir := range []string{kubernetesDir, snapshotDir, examplesDir} {
		for _, file := range yamlFiles(t, dir) {
			if isKustomization(file) {
				continue
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if len(splitDocuments(data)) == 0 {
				t.Errorf("%s: no YAML document", file)
			}
			m.objects = append(m.objects, decodeDocuments(t, dec, data, func([]byte) string { return file }, nil)...)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// decodeDocuments decodes the YAML documents of data strictly; a failure
// fails t, naming the document's file (fileOf) and index. take, if set,
// is offered each document first, and a document it takes is not decoded.
func decodeDocuments(t *testing.T, dec runtime.Decoder, data []byte, fileOf func(doc []byte) string, take func(file string, i int, doc []byte) bool) []object {
	t.Helper()
	var out []object
	for i, doc := range splitDocuments(data) {
		file := fileOf(doc)
		if take != nil && take(file, i, doc) {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s#%d: %v", file, i, err)
			continue
		}
		out = append(out, object{file: file, doc: i, gvk: *gvk, obj: obj})
	}
	return out
}

// all returns the objects of type T, with where they came from.
func all[T runtime.Object](m *manifests) ([]T, []object) {
	var out []T
	var from []object
	for _, o := range m.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
			from = append(from, o)
		}
	}
	return out, from
}

// inDir keeps the objects from files under dir.
func (m *manifests) inDir(dir string) *manifests {
	out := &manifests{}
	for _, o := range m.objects {
		if strings.HasPrefix(o.file, dir+"/") {
			out.objects = append(out.objects, o)
		}
	}
	return out
}

// kustomization is the part of kustomize's Kustomization we use; strict
// decoding into it catches a field this deployment does not expect.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func loadKustomization(t *testing.T, path string) kustomization {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: apiVersion/kind = %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", path, k.APIVersion, k.Kind)
	}
	return k
}

// TestEveryDocumentDecodesStrictly decodes every document of the manifest
// files into its Go type with unknown fields refused, and checks each is
// named. (ConfigMaps and Secrets are generated by deploy/site from its
// files: TestKustomizeBuild has them.)
func TestEveryDocumentDecodesStrictly(t *testing.T) {
	m := loadAll(t)
	if len(m.objects) == 0 {
		t.Fatal("no manifests found")
	}
	for _, o := range m.objects {
		meta, ok := o.obj.(interface{ GetName() string })
		if !ok || meta.GetName() == "" {
			t.Errorf("%s: no metadata.name", o)
		}
	}
	kinds := map[string]int{}
	for _, o := range m.objects {
		kinds[o.gvk.Kind]++
	}
	for _, want := range []string{
		"Namespace", "CSIDriver", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"Deployment", "DaemonSet", "Service", "StorageClass", "VolumeSnapshotClass",
		"PersistentVolumeClaim", "Pod", "VolumeSnapshot", "PersistentVolume", "VolumeAttributesClass",
		"VolumeGroupSnapshotClass", "VolumeGroupSnapshot",
	} {
		if kinds[want] == 0 {
			t.Errorf("no %s under deploy/", want)
		}
	}
}

// TestStrictDecodingRefusesUnknownFields proves the decoder used above is
// strict, for built-in and CRD types alike.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	dec := strictDecoder(newScheme(t))
	for name, doc := range map[string]string{
		"unknown spec field": `
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: x}
spec: {attachRequird: true}
`,
		"unknown container field": `
apiVersion: v1
kind: Pod
metadata: {name: x}
spec:
  containers: [{name: c, image: "a:v1", argz: ["--x"]}]
`,
		"wrong case": `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: x}
Provisioner: a.b.c
`,
		"duplicate key": `
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
data: {a: "1"}
data: {b: "2"}
`,
		"unknown VolumeSnapshotClass field": `
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata: {name: x}
driver: a.b.c
deletionPolicy: Delete
parameter: {}
`,
		"unknown SnapshotMetadataService field": `
apiVersion: cbt.storage.k8s.io/v1beta1
kind: SnapshotMetadataService
metadata: {name: x}
spec: {address: "a.b:6443", audience: x, caCert: eA==, caBundle: eA==}
`,
		"SnapshotMetadataService caCert not base64": `
apiVersion: cbt.storage.k8s.io/v1beta1
kind: SnapshotMetadataService
metadata: {name: x}
spec: {address: "a.b:6443", audience: x, caCert: set-from-the-tls-secret}
`,
		"unregistered kind": `
apiVersion: v1
kind: NoSuchKind
metadata: {name: x}
`,
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	ok := `
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: x}
spec: {source: {persistentVolumeClaimName: p}}
`
	if _, _, err := dec.Decode([]byte(ok), nil, nil); err != nil {
		t.Errorf("a valid VolumeSnapshot: %v", err)
	}
	sms := `
apiVersion: cbt.storage.k8s.io/v1beta1
kind: SnapshotMetadataService
metadata: {name: x}
spec: {address: "a.b:6443", audience: x, caCert: eA==}
`
	if obj, _, err := dec.Decode([]byte(sms), nil, nil); err != nil || string(obj.(*snapshotMetadataService).Spec.CACert) != "x" {
		t.Errorf("a valid SnapshotMetadataService: %v, %v", obj, err)
	}
}

// TestKustomizationListsEveryFile: `kubectl apply -k` of the base or of
// deploy/snapshotclass applies exactly the files that are there, each once.
func TestKustomizationListsEveryFile(t *testing.T) {
	for _, dir := range []string{kubernetesDir, snapshotDir} {
		k := loadKustomization(t, filepath.Join(dir, "kustomization.yaml"))
		listed := map[string]bool{}
		for _, r := range k.Resources {
			if listed[r] {
				t.Errorf("%s: kustomization lists %s twice", dir, r)
			}
			listed[r] = true
			if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
				t.Errorf("%s: kustomization lists %s: %v", dir, r, err)
			}
		}
		for _, f := range yamlFiles(t, dir) {
			if isKustomization(f) {
				continue
			}
			rel := strings.TrimPrefix(f, dir+"/")
			if !listed[rel] {
				t.Errorf("%s is not listed in the kustomization's resources", f)
			}
		}
		// The Namespace comes first so the files also apply one by one in
		// the listed order.
		if dir == kubernetesDir && (len(k.Resources) == 0 || k.Resources[0] != "namespace.yaml") {
			t.Errorf("%s: kustomization resources should start with namespace.yaml, got %v", dir, k.Resources)
		}
	}
}

// TestNoTabsOrCRLF keeps the YAML files under deploy/ and the site's
// files plain: YAML forbids tabs for indentation, and CRLF line ends
// confuse block scalars and env files.
func TestNoTabsOrCRLF(t *testing.T) {
	files := yamlFiles(t, ".")
	for _, name := range siteShipped {
		files = append(files, filepath.Join(siteDir, name))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("\t")) || bytes.Contains(data, []byte("\r")) {
			t.Errorf("%s holds a tab or a carriage return", f)
		}
	}
}
