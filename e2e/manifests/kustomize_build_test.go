package manifests

import (
	"os"
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
	"ConfigMap rbdcsi/rbdcsi-cluster-config": true,
	"Secret rbdcsi/rbdcsi-secret":            true,
	"Secret rbdcsi/rbdcsi-node-secret":       true,
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
// the e2e flags; an install with the snapshot-metadata component its
// objects and its sidecar (checkSnapshotMetadataBuild), also before the
// e2e component.
func TestKustomizeBuild(t *testing.T) {
	loaded := loadAll(t)
	baseFiles, snapFiles := loaded.inDir(kubernetesDir).keys(), loaded.inDir(snapshotDir).keys()

	// Every kustomization under deploy/ is one of those rendered here.
	rendered := []string{kubernetesDir, topologyDir, siteDir, snapshotDir, e2eDir, snapMetaDir, csiAddonsDir}
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
	inst := installed(t).keys()
	sameKeys(t, "deploy/site with deploy/snapshotclass", inst, union(site, snapFiles))
	cbt := installedWithSnapshotMetadata(t)
	sameKeys(t, "deploy/site and deploy/snapshotclass with deploy/snapshot-metadata", cbt.keys(), union(inst, snapshotMetadataObjects(t)))
	checkSnapshotMetadataBuild(t, "with deploy/snapshot-metadata", cbt)

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
	// deploy/e2e adds flags to containers/0, which must still be the plugin.
	cbtE2E := kustomizeBuild(t, fsys, "/deploy/cbt-e2e-site")
	checkPluginArgs(t, "deploy/snapshot-metadata, then deploy/e2e: the controller plugin", controllerPlugin(t, cbtE2E), "--health-address=:9808")
	checkSnapshotMetadataBuild(t, "deploy/snapshot-metadata, then deploy/e2e", cbtE2E)

	addons := installedWithCSIAddons(t)
	sameKeys(t, "deploy/site and deploy/snapshotclass with deploy/csi-addons", addons.keys(), union(inst, csiAddonsObjects(t)))
	checkCSIAddonsBuild(t, "with deploy/csi-addons", addons)
	addonsE2E := kustomizeBuild(t, fsys, "/deploy/addons-e2e-site")
	checkCSIAddonsBuild(t, "deploy/csi-addons, then deploy/topology and deploy/e2e", addonsE2E)
	checkPluginArgs(t, "deploy/csi-addons, then deploy/e2e: the node plugin", nodePlugin(t, addonsE2E),
		"--domain-labels=topology.kubernetes.io/zone", "--default-mounter=fuse")
}

// checkCSIAddonsBuild: the component appended the csi-addons sidecar to
// the controller and the node pods, after the containers that were there
// (the plugin stays first), and both plugins serve the csi-addons socket.
func checkCSIAddonsBuild(t *testing.T, what string, m *manifests) {
	t.Helper()
	for _, w := range workloads(m) {
		var names []string
		for _, c := range w.spec.Containers {
			names = append(names, c.Name)
		}
		if len(names) < 2 || names[0] != "rbdplugin" || names[len(names)-1] != "csi-addons" {
			t.Errorf("%s: %s's containers are %q, want the plugin first and the csi-addons sidecar last", what, w.name, names)
		}
		checkPluginArgs(t, what+": "+w.name, pluginContainer(t, w.spec), "--csi-addons-endpoint=unix:///csi/csi-addons.sock")
	}
}

// csiAddonsObjects are the objects deploy/csi-addons adds.
func csiAddonsObjects(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(csiAddonsDir + "/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), data, func([]byte) string { return csiAddonsDir + "/rbac.yaml" }, nil)}
	return m.keys()
}

// checkSnapshotMetadataBuild: the component appended its sidecar to the
// controller pods, after the containers that were there (the plugin
// stays first: kubectl's default container, and what patches of
// containers/0 mean), with its arguments and its certificate's Secret
// mounted read-only where they point; and the SnapshotMetadataService
// carries the CA the site gave (testServingCert).
func checkSnapshotMetadataBuild(t *testing.T, what string, m *manifests) {
	t.Helper()
	spec := only[*appsv1.Deployment](t, m, "Deployment").Spec.Template.Spec
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	if len(names) < 2 || names[0] != "rbdplugin" || names[len(names)-1] != "csi-snapshot-metadata" {
		t.Fatalf("%s: the controller's containers are %q, want the plugin first and the sidecar last", what, names)
	}
	sidecar := spec.Containers[len(names)-1]
	want := []string{"--csi-address=/csi/csi.sock", "--port=50051", "--tls-cert=/etc/rbdcsi/snapshot-metadata-tls/tls.crt",
		"--tls-key=/etc/rbdcsi/snapshot-metadata-tls/tls.key", "--http-endpoint=:8084", "--timeout=150s", "--v=2"}
	if !slices.Equal(sidecar.Args, want) {
		t.Errorf("%s: the sidecar's arguments are %q, want %q", what, sidecar.Args, want)
	}
	v, mnt, _, err := resolve(spec, sidecar, "/etc/rbdcsi/snapshot-metadata-tls/tls.crt")
	if err != nil || v.Secret == nil || v.Secret.SecretName != "rbdcsi-snapshot-metadata-tls" || !mnt.ReadOnly {
		t.Errorf("%s: the sidecar's certificate is not Secret rbdcsi-snapshot-metadata-tls, mounted read-only (%v)", what, err)
	}
	sms := only[*snapshotMetadataService](t, m, "SnapshotMetadataService")
	if ca := testServingCert(t)["ca.crt"]; string(sms.Spec.CACert) != ca {
		t.Errorf("%s: SnapshotMetadataService %s: caCert is not the base64 of the site's ca.crt", what, sms.Name)
	}
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
		"rbdcsi/rbdcsi-secret":      {users["userID"], users["userKey"]},
		"rbdcsi/rbdcsi-node-secret": {users["nodeUserID"], users["nodeUserKey"]},
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
