package manifests

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// TestNodeHasItsOwnCephUser: the node plugin's --node-secret-dir (its own
// Ceph user, which maps images but cannot create, remove or snapshot them)
// is a Secret of its own, never one that the controller mounts (its user
// can remove images) or a StorageClass names (a KEK Secret, which a node
// receives only while it stages a volume of that class).
func TestNodeHasItsOwnCephUser(t *testing.T) {
	m := installed(t)
	secrets, _ := all[*corev1.Secret](m)
	classes, _ := all[*storagev1.StorageClass](m)
	privileged := map[string]string{} // Secret name -> who uses it
	for _, sc := range classes {
		for k, v := range sc.Parameters {
			if strings.HasPrefix(k, "csi.storage.k8s.io/") && strings.HasSuffix(k, "-secret-name") {
				privileged[v] = "StorageClass " + sc.Name
			}
		}
	}
	var nodes []workload
	for _, w := range workloads(m) {
		plugin := oneContainer(t, w, pluginRepo)
		args := mustFlags(t, plugin)
		if dir, ok := args["controller-secret-dir"]; ok {
			if s, _, ok := mountedObject(t, w, plugin, "controller-secret-dir", dir, "Secret", secrets); ok {
				privileged[s.Name] = w.name
			}
		}
		if args["mode"] == "node" {
			nodes = append(nodes, w)
		}
	}
	if len(nodes) == 0 {
		t.Fatal("no node plugin")
	}
	for _, w := range nodes {
		plugin := oneContainer(t, w, pluginRepo)
		dir, ok := mustFlags(t, plugin)["node-secret-dir"]
		if !ok {
			t.Errorf("%s: no --node-secret-dir", w.name)
			continue
		}
		s, _, ok := mountedObject(t, w, plugin, "node-secret-dir", dir, "Secret", secrets)
		if !ok {
			continue
		}
		if who, shared := privileged[s.Name]; shared {
			t.Errorf("%s: --node-secret-dir is Secret %s, which %s uses too", w.name, s.Name, who)
		}
	}
}
