package manifests

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The directories of deploy/ that hold kustomizations, and the fake files
// the e2e overlay's generators read (scripts/k8s-e2e.sh writes the real
// ones into a copy of deploy/e2e/local; they are never committed).
const (
	e2eDir         = "e2e"
	groupsnapDir   = "e2e/groupsnap"
	fakeClusterMap = `[{"clusterID": "ceph1", "monitors": ["127.0.0.1:3300"]}]` + "\n"
)

var fakeLocal = map[string]string{
	"cluster-config.json": fakeClusterMap,
	"userID":              "csi-e2e",
	"userKey":             "AQBfakefakefakefakefakefakefakefakefake==",
	"nodeUserID":          "rbdcsi-node",
	"nodeUserKey":         "AQBnodenodenodenodenodenodenodenodenode==",
}

// deployFS is an in-memory copy of deploy/ (the directories with
// kustomizations), with the e2e overlay's local files faked and the two
// kustomizations scripts and users write beside them: the base with the
// topology component, and the e2e overlay with its groupsnap component
// (as scripts/k8s-e2e.sh writes it).
func deployFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	for _, dir := range []string{kubernetesDir, topologyDir, e2eDir} {
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
	for name, content := range fakeLocal {
		if err := fsys.WriteFile("/deploy/e2e/local/"+name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	for dir, k := range map[string]string{
		"/deploy/with-topology": "resources: [../kubernetes]\ncomponents: [../topology]\n",
		"/deploy/e2e-groupsnap": "resources: [../e2e]\ncomponents: [../e2e/groupsnap]\n",
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
// decodes every object strictly.
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
	return m
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

// nodePlugin is the rbdplugin container of the node DaemonSet, and
// controllerPlugin the controller Deployment's.
func nodePlugin(t *testing.T, m *manifests) corev1.Container {
	t.Helper()
	dss, _ := all[*appsv1.DaemonSet](m)
	if len(dss) != 1 {
		t.Fatalf("want one DaemonSet, have %d", len(dss))
	}
	return pluginContainer(t, dss[0].Spec.Template.Spec)
}

func controllerPlugin(t *testing.T, m *manifests) corev1.Container {
	t.Helper()
	deps, _ := all[*appsv1.Deployment](m)
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, have %d", len(deps))
	}
	return pluginContainer(t, deps[0].Spec.Template.Spec)
}

func pluginContainer(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == "rbdplugin" {
			return c
		}
	}
	t.Fatal("no rbdplugin container")
	return corev1.Container{}
}

// checkPluginArgs: every flag a rendered plugin container passes is one
// rbdplugin has, and the ones a kustomization adds are there.
func checkPluginArgs(t *testing.T, what string, c corev1.Container, want ...string) {
	t.Helper()
	flags := loadPluginFlags(t)
	for _, a := range c.Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, ok := flags[name]; !ok || !strings.HasPrefix(a, "--") {
			t.Errorf("%s: argument %q is not a flag rbdplugin has", what, a)
		}
	}
	for _, w := range want {
		if !slices.Contains(c.Args, w) {
			t.Errorf("%s: %s is not among the arguments %q", what, w, c.Args)
		}
	}
}

// TestKustomizeBuild renders every kustomization deploy/ ships, as
// kubectl would, and checks each yields what it is for: the base exactly
// the objects of its files; the topology component the base and its
// RBAC, with the flag and the token on the node plugin; the e2e overlay
// (with its generated files faked) the same objects with local images,
// the local cluster map and keys and the e2e flags; its groupsnap
// component the forky plugin image.
func TestKustomizeBuild(t *testing.T) {
	fsys := deployFS(t)
	files := loadAll(t).inDir(kubernetesDir).keys()

	// Every kustomization under deploy/ is one of those rendered here.
	rendered := []string{kubernetesDir, topologyDir, e2eDir, groupsnapDir}
	var shipped []string
	for _, f := range yamlFiles(t, ".") {
		if isKustomization(f) {
			shipped = append(shipped, path.Dir(f))
		}
	}
	sort.Strings(shipped)
	sort.Strings(rendered)
	if !slices.Equal(shipped, rendered) {
		t.Errorf("deploy/ ships kustomizations in %q; this test renders %q", shipped, rendered)
	}

	base := kustomizeBuild(t, fsys, "/deploy/kubernetes")
	sameKeys(t, "kustomize build deploy/kubernetes", base.keys(), files)

	withTopology := kustomizeBuild(t, fsys, "/deploy/with-topology")
	sameKeys(t, "deploy/kubernetes with deploy/topology", withTopology.keys(), union(files, topologyObjects(t)))
	node := nodePlugin(t, withTopology)
	checkPluginArgs(t, "with deploy/topology: the node plugin", node, "--domain-labels=topology.kubernetes.io/zone")
	token := false
	for _, mnt := range node.VolumeMounts {
		token = token || mnt.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	if !token {
		t.Error("with deploy/topology: the node plugin gets no token to read its Node with")
	}

	e2e := kustomizeBuild(t, fsys, "/deploy/e2e")
	sameKeys(t, "kustomize build deploy/e2e", e2e.keys(), union(files, topologyObjects(t)))
	checkE2E(t, e2e, "e2e")
	checkPluginArgs(t, "deploy/e2e: the node plugin", nodePlugin(t, e2e),
		"--domain-labels=topology.kubernetes.io/zone", "--default-mounter=fuse", "--registration-dir=/registration")
	checkPluginArgs(t, "deploy/e2e: the controller plugin", controllerPlugin(t, e2e), "--health-address=:9808")

	groupsnap := kustomizeBuild(t, fsys, "/deploy/e2e-groupsnap")
	sameKeys(t, "deploy/e2e with deploy/e2e/groupsnap", groupsnap.keys(), union(files, topologyObjects(t)))
	checkE2E(t, groupsnap, "e2e-forky")
}

// checkE2E: the e2e overlay's images are the locally built ones, never
// pulled (the plugin's tagged pluginTag), its namespaces' ConfigMaps hold
// the local cluster map beside the base's other keys, and its Secrets
// the local users.
func checkE2E(t *testing.T, m *manifests, pluginTag string) {
	t.Helper()
	var specs []corev1.PodSpec
	deps, _ := all[*appsv1.Deployment](m)
	dss, _ := all[*appsv1.DaemonSet](m)
	for _, d := range deps {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, d := range dss {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, spec := range specs {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			want := "localhost/rbdcsi-e2e/" + c.Name + ":e2e"
			if c.Name == "rbdplugin" {
				want = "localhost/rbdcsi-e2e/rbdplugin:" + pluginTag
			}
			if c.Image != want || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("e2e container %s: image %s (pull %s), want %s, never pulled", c.Name, c.Image, c.ImagePullPolicy, want)
			}
		}
	}
	cms, _ := all[*corev1.ConfigMap](m)
	maps := 0
	for _, cm := range cms {
		if cm.Name != "rbdcsi-cluster-config" {
			continue
		}
		maps++
		if cm.Data["cluster-config.json"] != fakeClusterMap {
			t.Errorf("e2e ConfigMap %s/%s: cluster-config.json %q, not the local map", cm.Namespace, cm.Name, cm.Data["cluster-config.json"])
		}
		var kms any
		if err := json.Unmarshal([]byte(cm.Data["kms-config.json"]), &kms); err != nil {
			t.Errorf("e2e ConfigMap %s/%s: kms-config.json did not survive the merge: %v", cm.Namespace, cm.Name, err)
		}
	}
	if maps != 2 {
		t.Errorf("e2e: %d ConfigMaps rbdcsi-cluster-config, want 2 (controller and node namespaces)", maps)
	}
	secrets, _ := all[*corev1.Secret](m)
	want := map[string][2]string{
		"rbdcsi/rbdcsi-secret":           {fakeLocal["userID"], fakeLocal["userKey"]},
		"rbdcsi-node/rbdcsi-node-secret": {fakeLocal["nodeUserID"], fakeLocal["nodeUserKey"]},
	}
	for _, s := range secrets {
		w, ok := want[s.Namespace+"/"+s.Name]
		if !ok {
			continue
		}
		delete(want, s.Namespace+"/"+s.Name)
		if string(s.Data["userID"]) != w[0] || string(s.Data["userKey"]) != w[1] || len(s.Data) != 2 || len(s.StringData) != 0 {
			t.Errorf("e2e Secret %s/%s does not hold exactly the local user %s", s.Namespace, s.Name, w[0])
		}
	}
	for k := range want {
		t.Errorf("e2e: no Secret %s", k)
	}
}
