package manifests

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The directories of deploy/ that hold kustomizations.
const (
	siteDir       = "site"
	snapshotDir   = "snapshotclass"
	e2eDir        = "e2e"
	snapMetaDir   = "snapshot-metadata"
	csiAddonsDir  = "csi-addons"
	siteUserValue = "helm/values/site.yaml"
	originKey     = "config.kubernetes.io/origin"
)

// siteUserFiles are the user files deploy/site reads and does not ship
// (userID, userKey, nodeUserID, nodeUserKey), as the tests fill them in:
// the users of helm/values/site.yaml, so that the overlay's build and the
// chart's render of those values hold the same Secrets.
func siteUserFiles(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(siteUserValue)
	if err != nil {
		t.Fatal(err)
	}
	type user struct {
		UserID  string `json:"userID"`
		UserKey string `json:"userKey"`
	}
	var v struct {
		Secrets struct{ Controller, Node user } `json:"secrets"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", siteUserValue, err)
	}
	out := map[string]string{
		"userID": v.Secrets.Controller.UserID, "userKey": v.Secrets.Controller.UserKey,
		"nodeUserID": v.Secrets.Node.UserID, "nodeUserKey": v.Secrets.Node.UserKey,
	}
	for name, content := range out {
		if content == "" {
			t.Fatalf("%s: no value for deploy/site's %s", siteUserValue, name)
		}
	}
	return out
}

// deployFS is an in-memory copy of deploy/ (the directories with
// kustomizations) with deploy/site filled in as a user fills it in: its
// user files written, and the files in site (name -> content) replacing
// the shipped ones; and deploy/snapshot-metadata's certificate files
// written (testServingCert). Beside them, the kustomizations users and
// scripts write: the base with the topology component, the site with the
// topology and e2e components (as make e2e runs docs/install.md), and
// "installed": what an install applies (deploy/site, then
// deploy/snapshotclass), with kustomize's origin annotations, which name
// each object's file; "installed-cbt" the same with the snapshot-metadata
// component, and "cbt-e2e-site" the site with it before the e2e's.
func deployFS(t *testing.T, site map[string]string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	for _, dir := range []string{kubernetesDir, topologyDir, siteDir, snapshotDir, e2eDir, snapMetaDir, csiAddonsDir} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return fsys.WriteFile(path.Join("/deploy", filepath.ToSlash(p)), data)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files := siteUserFiles(t)
	for name, content := range site {
		files[name] = content
	}
	for name, content := range files {
		if err := fsys.WriteFile("/deploy/site/"+name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range testServingCert(t) {
		if err := fsys.WriteFile("/deploy/"+snapMetaDir+"/"+name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	for dir, k := range map[string]string{
		"/deploy/with-topology": "resources: [../kubernetes]\ncomponents: [../topology]\n",
		"/deploy/e2e-site":      "resources: [../site]\ncomponents: [../topology, ../e2e]\n",
		"/deploy/installed":     "resources: [../site, ../snapshotclass]\nbuildMetadata: [originAnnotations]\n",
		"/deploy/installed-cbt": "resources: [../site, ../snapshotclass]\ncomponents: [../snapshot-metadata]\n" +
			"buildMetadata: [originAnnotations]\n",
		"/deploy/cbt-e2e-site": "resources: [../site]\ncomponents: [../snapshot-metadata, ../topology, ../e2e]\n",
		"/deploy/installed-addons": "resources: [../site, ../snapshotclass]\ncomponents: [../csi-addons]\n" +
			"buildMetadata: [originAnnotations]\n",
		"/deploy/addons-e2e-site": "resources: [../site]\ncomponents: [../csi-addons, ../topology, ../e2e]\n",
	} {
		doc := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + k
		if err := fsys.WriteFile(dir+"/kustomization.yaml", []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	return fsys
}

// kustomizeBuild renders dir of fsys with kustomize's Go API, the code
// `kubectl kustomize` and `kubectl apply -k` run, with their defaults, and
// decodes every object strictly. An object with an origin annotation is
// named after the file it came from, and loses the annotation.
func kustomizeBuild(t *testing.T, fsys filesys.FileSystem, dir string) *manifests {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), out, func([]byte) string { return dir }, nil)}
	if t.Failed() {
		t.FailNow()
	}
	if len(m.objects) == 0 {
		t.Fatalf("kustomize build %s: no objects", dir)
	}
	for i := range m.objects {
		if file := takeOrigin(t, m.objects[i].obj); file != "" {
			m.objects[i].file = file
		}
	}
	return m
}

// takeOrigin removes kustomize's origin annotation from obj and returns
// the file it names, relative to deploy/ ("" without one).
func takeOrigin(t *testing.T, obj runtime.Object) string {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	ann := acc.GetAnnotations()
	origin, ok := ann[originKey]
	if !ok {
		return ""
	}
	delete(ann, originKey)
	if len(ann) == 0 {
		ann = nil
	}
	acc.SetAnnotations(ann)
	var o struct {
		Path         string `json:"path"`
		ConfiguredIn string `json:"configuredIn"`
		ConfiguredBy struct {
			Kind string `json:"kind"`
		} `json:"configuredBy"`
	}
	if err := yaml.Unmarshal([]byte(origin), &o); err != nil {
		t.Fatalf("origin annotation %q: %v", origin, err)
	}
	rel := func(p string) string {
		// Paths are relative to a kustomization one level below deploy/.
		return strings.TrimPrefix(path.Clean(path.Join("x", p)), "../")
	}
	if o.Path != "" {
		return rel(o.Path)
	}
	return rel(o.ConfiguredIn) + " (" + o.ConfiguredBy.Kind + ")"
}

// installed is what an install applies: `kubectl apply -k` of deploy/site
// (its files as shipped, the user files from siteUserFiles) and of
// deploy/snapshotclass. Each object is named after its file.
func installed(t *testing.T) *manifests {
	t.Helper()
	return kustomizeBuild(t, deployFS(t, nil), "/deploy/installed")
}

// installedWithSnapshotMetadata is installed's install with changed-block
// tracking: the same with `components: [../snapshot-metadata]`.
func installedWithSnapshotMetadata(t *testing.T) *manifests {
	t.Helper()
	return kustomizeBuild(t, deployFS(t, nil), "/deploy/installed-cbt")
}

// installedWithCSIAddons is installed's install with the csi-addons
// sidecars: the same with `components: [../csi-addons]`.
func installedWithCSIAddons(t *testing.T) *manifests {
	t.Helper()
	return kustomizeBuild(t, deployFS(t, nil), "/deploy/installed-addons")
}

// eachInstall runs check, as a subtest, on each install kustomize makes
// of the shipped files: without and with changed-block tracking, which
// adds a sidecar to the controller pods, and with the csi-addons
// component, which adds one to the controller and the node pods.
func eachInstall(t *testing.T, check func(*testing.T, *manifests)) {
	t.Helper()
	for _, in := range []struct {
		name  string
		build func(*testing.T) *manifests
	}{{"site", installed}, {"site+snapshot-metadata", installedWithSnapshotMetadata}, {"site+csi-addons", installedWithCSIAddons}} {
		t.Run(in.name, func(t *testing.T) { check(t, in.build(t)) })
	}
}

func objectKey(o runtime.Object, gvk schema.GroupVersionKind) string {
	meta := o.(interface {
		GetName() string
		GetNamespace() string
	})
	return gvk.Kind + " " + meta.GetNamespace() + "/" + meta.GetName()
}

func (m *manifests) keys() map[string]bool {
	out := map[string]bool{}
	for _, o := range m.objects {
		out[objectKey(o.obj, o.gvk)] = true
	}
	return out
}

// sameKeys fails t where got and want hold different objects.
func sameKeys(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	for k := range want {
		if !got[k] {
			t.Errorf("%s lacks %s", what, k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("%s has %s, which it should not", what, k)
		}
	}
}

// topologyObjects are the objects deploy/topology adds to the base.
func topologyObjects(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(topologyDir + "/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), data, func([]byte) string { return topologyDir + "/rbac.yaml" }, nil)}
	return m.keys()
}

func union(sets ...map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			out[k] = true
		}
	}
	return out
}
