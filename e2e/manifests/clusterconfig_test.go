package manifests

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// TestClusterConfigAndSecret: the plugin's --cluster-config is a key of a
// mounted ConfigMap that holds a valid cluster map, the same map for the
// controller and the node plugin,
// and the controller's --controller-secret-dir a mounted Secret with
// userID and userKey.
func TestClusterConfigAndSecret(t *testing.T) {
	m := installed(t)
	cms, _ := all[*corev1.ConfigMap](m)
	secrets, _ := all[*corev1.Secret](m)
	defaults := loadPluginFlags(t)
	maps := map[string]string{} // cluster map -> the first workload that reads it
	kmsConfigs := map[string]bool{}
	for _, w := range workloads(m) {
		plugin := oneContainer(t, w, pluginRepo)
		args := mustFlags(t, plugin)

		cfg := args["cluster-config"]
		if cfg == "" {
			cfg = defaults["cluster-config"]
		}
		cm, rel, ok := mountedObject(t, w, plugin, "cluster-config", cfg, "ConfigMap", cms)
		if !ok {
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
		if _, err := cluster.LoadMap(file); err != nil {
			t.Errorf("%s: ConfigMap %s: %v", w.name, cm.Name, err)
		}
		maps[data] = w.name
		if len(maps) > 1 {
			t.Errorf("%s: ConfigMap %s/%s holds another cluster map than the other workloads read", w.name, cm.Namespace, cm.Name)
		}
		checkKMSConfig(t, w, plugin, args["kms-config"], cms, kmsConfigs)

		dir, ok := args["controller-secret-dir"]
		if !ok {
			if args["mode"] != "node" {
				t.Errorf("%s: the controller has no --controller-secret-dir", w.name)
			}
			continue
		}
		s, rel, ok := mountedObject(t, w, plugin, "controller-secret-dir", dir, "Secret", secrets)
		if !ok {
			continue
		}
		// The driver reads the keys as files of the directory itself.
		if rel != "" {
			t.Errorf("%s: --controller-secret-dir %s is %q inside Secret %s, not its mount point", w.name, dir, rel, s.Name)
			continue
		}
		sdir := t.TempDir()
		for k, val := range secretData(s) {
			if err := os.WriteFile(filepath.Join(sdir, k), []byte(val), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cluster.CredentialsFromDir(sdir); err != nil {
			t.Errorf("%s: Secret %s as --controller-secret-dir: %v", w.name, s.Name, err)
		}
	}
}

// mountedObject finds the object of list (a ConfigMap or a Secret, named
// kind) whose volume holds path p in w's container c, and p's path inside
// that volume. What is missing is reported against --flag.
func mountedObject[T interface {
	namedObject
	comparable
}](t *testing.T, w workload, c corev1.Container, flag, p, kind string, list []T) (obj T, rel string, ok bool) {
	t.Helper()
	v, _, rel, err := resolve(w.spec, c, p)
	name := ""
	switch {
	case err != nil:
	case kind == "ConfigMap" && v.ConfigMap != nil:
		name = v.ConfigMap.Name
	case kind == "Secret" && v.Secret != nil:
		name = v.Secret.SecretName
	}
	if name == "" {
		t.Errorf("%s: --%s %s is not in a mounted %s (%v)", w.name, flag, p, kind, err)
		return obj, "", false
	}
	var none T
	if obj = findNamed(list, w.namespace, name); obj == none {
		t.Errorf("%s: %s %s/%s is not installed by deploy/site", w.name, kind, w.namespace, name)
		return obj, "", false
	}
	return obj, rel, true
}

// checkKMSConfig: --kms-config is a key of a mounted ConfigMap that holds a
// valid KMS configuration, the same for every workload (the controller
// wraps data keys that the node plugins unwrap).
func checkKMSConfig(t *testing.T, w workload, plugin corev1.Container, path string, cms []*corev1.ConfigMap, seen map[string]bool) {
	t.Helper()
	if path == "" {
		t.Errorf("%s: no --kms-config: encrypted StorageClasses would be refused", w.name)
		return
	}
	cm, rel, ok := mountedObject(t, w, plugin, "kms-config", path, "ConfigMap", cms)
	if !ok {
		return
	}
	data, ok := cm.Data[rel]
	if !ok {
		t.Errorf("%s: ConfigMap %s has no key %q", w.name, cm.Name, rel)
		return
	}
	if _, err := kms.ParseConfig([]byte(data)); err != nil {
		t.Errorf("%s: ConfigMap %s: %v", w.name, cm.Name, err)
	}
	seen[data] = true
	if len(seen) > 1 {
		t.Errorf("%s: ConfigMap %s/%s holds another KMS configuration than the other workloads read", w.name, cm.Namespace, cm.Name)
	}
}
