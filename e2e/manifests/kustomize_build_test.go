package manifests

import (
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// siteGenerated are the objects deploy/site generates from its files.
var siteGenerated = map[string]bool{
	"ConfigMap rbdcsi/rbdcsi-cluster-config":      true,
	"ConfigMap rbdcsi-node/rbdcsi-cluster-config": true,
	"Secret rbdcsi/rbdcsi-secret":                 true,
	"Secret rbdcsi-node/rbdcsi-node-secret":       true,
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
// kubectl would, and checks each yields what it is for: the base and
// deploy/snapshotclass exactly the objects of their files; deploy/site
// the base and the objects it generates from its files; the topology
// component the base and its RBAC, with the flag and the token on the node
// plugin; the site with the e2e component (and topology, as make e2e adds
// them through docs/install.md) the site's objects, images and users with
// the e2e flags.
func TestKustomizeBuild(t *testing.T) {
	loaded := loadAll(t)
	baseFiles, snapFiles := loaded.inDir(kubernetesDir).keys(), loaded.inDir(snapshotDir).keys()

	// Every kustomization under deploy/ is one of those rendered here.
	rendered := []string{kubernetesDir, topologyDir, siteDir, snapshotDir, e2eDir}
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

	fsys := deployFS(t, nil)
	sameKeys(t, "kustomize build deploy/kubernetes", kustomizeBuild(t, fsys, "/deploy/kubernetes").keys(), baseFiles)
	sameKeys(t, "kustomize build deploy/snapshotclass", kustomizeBuild(t, fsys, "/deploy/snapshotclass").keys(), snapFiles)
	site := kustomizeBuild(t, fsys, "/deploy/site").keys()
	sameKeys(t, "kustomize build deploy/site", site, union(baseFiles, siteGenerated))
	sameKeys(t, "deploy/site with deploy/snapshotclass", installed(t).keys(), union(site, snapFiles))

	withTopology := kustomizeBuild(t, fsys, "/deploy/with-topology")
	sameKeys(t, "deploy/kubernetes with deploy/topology", withTopology.keys(), union(baseFiles, topologyObjects(t)))
	node := nodePlugin(t, withTopology)
	checkPluginArgs(t, "with deploy/topology: the node plugin", node, "--domain-labels=topology.kubernetes.io/zone")
	token := false
	for _, mnt := range node.VolumeMounts {
		token = token || mnt.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	if !token {
		t.Error("with deploy/topology: the node plugin gets no token to read its Node with")
	}

	e2e := kustomizeBuild(t, fsys, "/deploy/e2e-site")
	sameKeys(t, "deploy/site with deploy/topology and deploy/e2e", e2e.keys(), union(site, topologyObjects(t)))
	checkE2E(t, e2e, withTopology)
	checkPluginArgs(t, "deploy/e2e: the node plugin", nodePlugin(t, e2e),
		"--domain-labels=topology.kubernetes.io/zone", "--default-mounter=fuse", "--registration-dir=/registration")
	checkPluginArgs(t, "deploy/e2e: the controller plugin", controllerPlugin(t, e2e), "--health-address=:9808")
}

// checkE2E: the e2e component changes no image and no pull policy (the
// e2e imports the release's images and the sidecars under the names the
// manifests use), so each container that stays runs what it runs in ref;
// and the Secrets hold the users of deploy/site's user files.
func checkE2E(t *testing.T, m, ref *manifests) {
	t.Helper()
	images := map[string]corev1.Container{}
	for _, w := range workloads(ref) {
		for _, c := range w.spec.Containers {
			images[w.name+"/"+c.Name] = c
		}
	}
	for _, w := range workloads(m) {
		for _, c := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
			want, ok := images[w.name+"/"+c.Name]
			if !ok || c.Image != want.Image || c.ImagePullPolicy != want.ImagePullPolicy {
				t.Errorf("e2e container %s/%s: image %s (pull %s), want the shipped %s (pull %s)", w.name, c.Name, c.Image, c.ImagePullPolicy, want.Image, want.ImagePullPolicy)
			}
		}
	}
	users := siteUserFiles(t)
	want := map[string][2]string{
		"rbdcsi/rbdcsi-secret":           {users["userID"], users["userKey"]},
		"rbdcsi-node/rbdcsi-node-secret": {users["nodeUserID"], users["nodeUserKey"]},
	}
	secrets, _ := all[*corev1.Secret](m)
	for _, s := range secrets {
		w, ok := want[s.Namespace+"/"+s.Name]
		if !ok {
			continue
		}
		delete(want, s.Namespace+"/"+s.Name)
		if string(s.Data["userID"]) != w[0] || string(s.Data["userKey"]) != w[1] || len(s.Data) != 2 || len(s.StringData) != 0 {
			t.Errorf("e2e Secret %s/%s does not hold exactly the site's user %s", s.Namespace, s.Name, w[0])
		}
	}
	for k := range want {
		t.Errorf("e2e: no Secret %s", k)
	}
}
