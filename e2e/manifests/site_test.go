package manifests

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/kustomize/api/krusty"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// The files of deploy/site a user fills in: shipped with example content,
// and the user files, which are not shipped.
var (
	siteShipped = []string{"cluster-config.json", "kms-config.json", "settings.env"}
	siteUsers   = []string{"userID", "userKey", "nodeUserID", "nodeUserKey"}
	siteKeys    = []string{"clusterID", "pool", "nodeRegistry", "pluginImage"}
)

// readSettings parses an env file as kustomize does: KEY=VALUE lines,
// comments and blank lines skipped.
func readSettings(t *testing.T, data string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("settings.env: %q is not KEY=VALUE", line)
		}
		out[k] = v
	}
	return out
}

// TestSiteFilesReachTheObjects fills deploy/site in with values unlike
// the shipped ones and checks that each reaches every object that uses it,
// so an install needs no edit of the base: settings.env's clusterID and
// pool in every StorageClass, its node registry and plugin image in both
// plugins; the one cluster-config.json and kms-config.json in both
// namespaces' ConfigMaps; the user files in the Secrets; and settings.env
// itself never applied.
func TestSiteFilesReachTheObjects(t *testing.T) {
	site := map[string]string{
		"settings.env": "# a site\nclusterID=site-a\npool=kube-pool\nnodeRegistry=site-a/registry-pool\n" +
			"pluginImage=registry.example.org/storage/rbdplugin:v9.9.9\n",
		"cluster-config.json": `[{"clusterID": "site-a", "monitors": ["v2:198.51.100.1:3300"]},` +
			` {"clusterID": "site-a-t1", "monitors": ["v2:198.51.100.1:3300"], "rbd": {"radosNamespace": "t1"}}]` + "\n",
		"kms-config.json": `{"secret": {"type": "secret", "keyPrefix": "siteKEK"}}` + "\n",
		"userID":          "site-user",
		"userKey":         "AQBsitesitesitesitesitesitesitesitesite==",
		"nodeUserID":      "site-node",
		"nodeUserKey":     "AQBnodenodenodenodenodenodenodenodenode==",
	}
	m := kustomizeBuild(t, deployFS(t, site), "/deploy/site")
	sameKeys(t, "deploy/site filled in", m.keys(), kustomizeBuild(t, deployFS(t, nil), "/deploy/site").keys())

	scs, _ := all[*storagev1.StorageClass](m)
	if len(scs) == 0 {
		t.Fatal("no StorageClass")
	}
	for _, sc := range scs {
		if sc.Parameters["clusterID"] != "site-a" || sc.Parameters["pool"] != "kube-pool" {
			t.Errorf("StorageClass %s: clusterID %q, pool %q; settings.env says site-a, kube-pool",
				sc.Name, sc.Parameters["clusterID"], sc.Parameters["pool"])
		}
	}
	for what, c := range map[string]corev1.Container{"controller": controllerPlugin(t, m), "node": nodePlugin(t, m)} {
		if c.Image != "registry.example.org/storage/rbdplugin:v9.9.9" {
			t.Errorf("the %s plugin runs %s, not settings.env's pluginImage", what, c.Image)
		}
		checkPluginArgs(t, "the "+what+" plugin", c, "--node-registry=site-a/registry-pool")
		if n := len(slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return !strings.HasPrefix(a, "--node-registry=") })); n != 1 {
			t.Errorf("the %s plugin has %d --node-registry flags, want 1", what, n)
		}
	}

	cms, _ := all[*corev1.ConfigMap](m)
	for _, cm := range cms {
		if cm.Name != "rbdcsi-cluster-config" {
			t.Errorf("ConfigMap %s/%s: only the cluster map's ConfigMaps should be applied (settings.env is local-config)", cm.Namespace, cm.Name)
			continue
		}
		if cm.Data["cluster-config.json"] != site["cluster-config.json"] || cm.Data["kms-config.json"] != site["kms-config.json"] || len(cm.Data) != 2 {
			t.Errorf("ConfigMap %s/%s does not hold exactly the site's cluster-config.json and kms-config.json: %v", cm.Namespace, cm.Name, cm.Data)
		}
	}
	if len(cms) != 1 {
		t.Errorf("%d ConfigMaps, want the cluster map's in rbdcsi", len(cms))
	}
	secrets, _ := all[*corev1.Secret](m)
	want := map[string][2]string{
		"rbdcsi/rbdcsi-secret":      {site["userID"], site["userKey"]},
		"rbdcsi/rbdcsi-node-secret": {site["nodeUserID"], site["nodeUserKey"]},
	}
	for _, s := range secrets {
		w := want[s.Namespace+"/"+s.Name]
		delete(want, s.Namespace+"/"+s.Name)
		if string(s.Data["userID"]) != w[0] || string(s.Data["userKey"]) != w[1] || len(s.Data) != 2 {
			t.Errorf("Secret %s/%s does not hold exactly the site's user %s", s.Namespace, s.Name, w[0])
		}
	}
	for k := range want {
		t.Errorf("no Secret %s", k)
	}
}

// TestSiteShippedFiles: deploy/site's shipped files are what the plugin
// and kustomize take and agree with each other (the settings name a
// cluster of the map, and the node registry is in its pool); the user
// files are not shipped, .gitignore keeps them out of git, and a build
// without one fails naming it.
func TestSiteShippedFiles(t *testing.T) {
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(siteDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	clusters, err := cluster.ParseMap([]byte(read("cluster-config.json")))
	if err != nil {
		t.Fatalf("site/cluster-config.json: %v", err)
	}
	if _, err := kms.ParseConfig([]byte(read("kms-config.json"))); err != nil {
		t.Errorf("site/kms-config.json: %v", err)
	}
	settings := readSettings(t, read("settings.env"))
	var keys []string
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := slices.Sorted(slices.Values(siteKeys)); !slices.Equal(keys, want) {
		t.Errorf("site/settings.env sets %v, want %v (the keys kustomization.yaml's replacements read)", keys, want)
	}
	if !slices.ContainsFunc(clusters, func(c cluster.Cluster) bool { return c.ClusterID == settings["clusterID"] }) {
		t.Errorf("site/settings.env: clusterID %q is not in cluster-config.json", settings["clusterID"])
	}
	if settings["nodeRegistry"] != settings["clusterID"]+"/"+settings["pool"] {
		t.Errorf("site/settings.env: nodeRegistry %q, want the classes' %s/%s", settings["nodeRegistry"], settings["clusterID"], settings["pool"])
	}
	if _, err := config.ParseParams(map[string]string{"clusterID": settings["clusterID"], "pool": settings["pool"]}); err != nil {
		t.Errorf("site/settings.env: %v", err)
	}

	ignored := strings.Fields(read(".gitignore"))
	for _, name := range siteUsers {
		if !slices.Contains(ignored, "/"+name) {
			t.Errorf("site/.gitignore does not list /%s", name)
		}
		if _, err := os.Stat(filepath.Join(siteDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("site/%s is in the tree (%v): user files are written at install, never shipped", name, err)
		}
	}
	for _, name := range siteShipped {
		if slices.Contains(ignored, "/"+name) {
			t.Errorf("site/.gitignore lists %s, which is shipped", name)
		}
	}

	fsys := deployFS(t, nil)
	if err := fsys.RemoveAll("/deploy/site/userKey"); err != nil {
		t.Fatal(err)
	}
	_, err = krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/deploy/site")
	if err == nil || !strings.Contains(err.Error(), "userKey") {
		t.Errorf("deploy/site without userKey: %v, want a failure naming userKey", err)
	}
}
