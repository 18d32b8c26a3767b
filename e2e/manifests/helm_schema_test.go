//go:build helm

// The chart's values: what the schema and the chart refuse, what the value
// files of the test matrix lead to, and how the values' parameters match
// the driver's.

package manifests

import (
	"encoding/json"
	"encoding/pem"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
)

// TestHelmSchemaRefusesBadValues: each mistake below, laid over
// helm/values/site.yaml, makes `helm template` fail with a message
// that names it: values.schema.json for what a schema can say, the
// chart's "rbdcsi.validate" template for what it cannot (cross-field
// rules). The messages are logged so a reader can judge them.
func TestHelmSchemaRefusesBadValues(t *testing.T) {
	base := filepath.Join(helmValuesDir, "site.yaml")
	caCert := strconv.Quote(testServingCert(t)["ca.crt"]) // a YAML double-quoted string
	for _, tc := range []struct {
		name, values string
		want         string // in helm's error output; "" for values that must pass
	}{
		{"valid overrides", `
controller: {replicas: 1, leaderElection: {enabled: false}, extraArgs: ["--ceph-timeout=20s"]}
storageClasses:
  - {name: fast, pool: ssd, fsType: xfs, parameters: {mounter: nbd, maxIops: 2000, baseIops: "100"}}
  - {name: zoned, parameters: {topologyConstrainedPools: '[{"poolName":"a"}]'}}
volumeAttributesClasses: [{name: gold, parameters: {maxIops: "5000"}}]
`, ""},
		{"a parent chart's globals", "global: {imageRegistry: mirror.example.org, storageClass: fast}", ""},
		{"names overridden", "nameOverride: ceph-rbd\nfullnameOverride: storage", ""},
		{"a tenant's RADOS namespace", `clusters:
  - {clusterID: ceph1, monitors: ["10.0.0.1"]}
  - {clusterID: ceph1-t1, monitors: ["10.0.0.1"], radosNamespace: t1}
storageClasses: [{name: t1, clusterID: ceph1-t1, fsType: ext4}]`, ""},
		{"nameOverride not a DNS label", "nameOverride: Ceph_RBD", "'/nameOverride': 'Ceph_RBD' does not match pattern"},
		{"radosNamespace with a slash", `clusters: [{clusterID: ceph1, monitors: ["10.0.0.1"], radosNamespace: a/b}]`,
			"'/clusters/0/radosNamespace': 'a/b' does not match pattern"},
		{"no pool and no node registry", "pool: null", "nodeRegistry is empty and so is pool"},
		{"typo at the top", "controler: {replicas: 1}", "additional properties 'controler' not allowed"},
		{"unknown controller key", "controller: {replica: 1}", "additional properties 'replica' not allowed"},
		{"replicas not a number", "controller: {replicas: two}", "'/controller/replicas': got string, want integer"},
		{"image tag latest", "images: {plugin: {tag: latest}}", "images.plugin.tag: \"latest\" is not a pinned version"},
		{"StorageClass parameter typo", "storageClasses: [{name: a, pool: rbd, parameters: {imageFeature: layering}}]",
			"additional properties 'imageFeature' not allowed"},
		{"mounter rbd", "storageClasses: [{name: a, pool: rbd, parameters: {mounter: rbd}}]",
			"'/storageClasses/0/parameters/mounter': value must be one of 'krbd', 'nbd', 'fuse'"},
		{"fsType btrfs", "storageClasses: [{name: a, pool: rbd, fsType: btrfs}]",
			"'/storageClasses/0/fsType': value must be one of 'ext4', 'xfs'"},
		{"no clusters", "clusters: []", "'/clusters': minItems"},
		{"nodeRegistry without a slash", "nodeRegistry: rbd", "'/nodeRegistry': 'rbd' does not match pattern"},
		{"nodeRegistry of an unknown cluster", "nodeRegistry: other/rbd", `cluster "other" is not in clusters`},
		{"clusterID twice", `clusters: [{clusterID: a, monitors: ["10.0.0.1"]}, {clusterID: a, monitors: ["10.0.0.2"]}]
nodeRegistry: a/rbd`, `clusterID "a" is listed twice`},
		{"bogus default mounter", "node: {defaultMounter: bogus}", "'/node/defaultMounter': value must be one of"},
		{"two replicas without leader election", "controller: {replicas: 2, leaderElection: {enabled: false}}",
			"controller.replicas > 1 needs controller.leaderElection.enabled"},
		{"StorageClass of an unknown cluster", "storageClasses: [{name: a, clusterID: nope, pool: rbd}]",
			`storageClasses a: clusterID "nope" is not in clusters`},
		{"created Secret without a key", `secrets: {controller: {create: true, userKey: ""}}`,
			"secrets.controller: create is true, so userID and userKey are needed"},
		{"StorageClass without a pool", "pool: null\nnodeRegistry: ceph1/rbd\nstorageClasses: [{name: a}]",
			"storageClasses a: needs pool (or the top-level pool), or parameters.topologyConstrainedPools"},
		{"negative QoS limit", "storageClasses: [{name: a, pool: rbd, parameters: {maxIops: -5}}]",
			"'/storageClasses/0/parameters/maxIops': minimum: got -5, want 0"},
		{"extraArgs not a flag", "controller: {extraArgs: [foo]}", "'/controller/extraArgs/0': 'foo' does not match pattern"},
		{"changed-block tracking", "snapshotMetadata: {enabled: true, audience: backup.example.org}", ""},
		{"changed-block tracking with a Secret of one's own",
			"snapshotMetadata: {enabled: true, tls: {existingSecret: my-cert, caCert: " + caCert + "}}", ""},
		{"snapshotMetadata.enabled not a boolean", `snapshotMetadata: {enabled: "yes"}`,
			"'/snapshotMetadata/enabled': got string, want boolean"},
		{"snapshotMetadata key typo", "snapshotMetadata: {enabled: true, tls: {secretName: my-cert}}",
			"additional properties 'secretName' not allowed"},
		{"existingSecret without caCert", "snapshotMetadata: {enabled: true, tls: {existingSecret: my-cert}}",
			"snapshotMetadata.tls.existingSecret needs snapshotMetadata.tls.caCert"},
		{"caCert without existingSecret", "snapshotMetadata: {enabled: true, tls: {caCert: " + caCert + "}}",
			"snapshotMetadata.tls.caCert is only for snapshotMetadata.tls.existingSecret"},
		{"caCert not a PEM certificate", "snapshotMetadata: {tls: {existingSecret: my-cert, caCert: LS0tLS1CRUdJTg==}}",
			"'/snapshotMetadata/tls/caCert': 'LS0tLS1CRUdJTg==' does not match pattern"},
		{"existingSecret not a Secret name", "snapshotMetadata: {tls: {existingSecret: My_Cert, caCert: " + caCert + "}}",
			"'/snapshotMetadata/tls/existingSecret': 'My_Cert' does not match pattern"},
		{"snapshot-metadata image tag latest", "images: {snapshotMetadata: {tag: latest}}",
			"images.snapshotMetadata.tag: \"latest\" is not a pinned version"},
		{"an encrypted class with its KEK Secret", `secrets: {keks: {name: tenant-keks}}
storageClasses: [{name: a, pool: rbd, keySecret: tenant-keks, parameters: {encrypted: "true", encryptionKMSID: secret}}]`, ""},
		{"keySecret not a Secret name", `storageClasses: [{name: a, pool: rbd, keySecret: My_KEKs, parameters: {encrypted: "true", encryptionKMSID: secret}}]`,
			"'/storageClasses/0/keySecret': 'My_KEKs' does not match pattern"},
		{"encrypted class without keySecret", `storageClasses: [{name: a, pool: rbd, parameters: {encrypted: "true", encryptionKMSID: secret}}]`,
			"storageClasses a: encrypted classes need keySecret"},
		{"keySecret on a class that is not encrypted", "storageClasses: [{name: a, pool: rbd, keySecret: keks}]",
			"storageClasses a: keySecret is for encrypted classes"},
		{"keySecret the Ceph user's Secret", `storageClasses: [{name: a, pool: rbd, keySecret: rbdcsi-secret, parameters: {encrypted: "true", encryptionKMSID: secret}}]`,
			`storageClasses a: keySecret "rbdcsi-secret" is secrets.controller.name`},
		{"secrets.keks the Ceph user's Secret", "secrets: {keks: {name: rbdcsi-secret}}",
			`secrets.keks.name "rbdcsi-secret" is secrets.controller.name`},
		{"secrets.keks without a name", `secrets: {keks: {name: ""}}`, "'/secrets/keks/name': '' does not match pattern"},
		{"secrets.keks made by the chart", "secrets: {keks: {create: true}}", "additional properties 'create' not allowed"},
		{"a Ceph Secret in a class's parameters", "storageClasses: [{name: a, pool: rbd, parameters: {csi.storage.k8s.io/provisioner-secret-name: rbdcsi-secret}}]",
			"additional properties 'csi.storage.k8s.io/provisioner-secret-name' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(tc.values+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := helmTemplate(t, base, file)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("helm template refused valid values: %v\n%s", err, stderr)
			case tc.want == "":
				return
			case err == nil:
				t.Fatalf("helm template accepted:\n%s", tc.values)
			case !strings.Contains(stderr, tc.want):
				t.Errorf("helm's message lacks %q:\n%s", tc.want, stderr)
			}
			t.Logf("helm says: %s", strings.TrimSpace(stderr))
		})
	}
}

// TestHelmSchemaNamesDriverParams: the schema lists exactly the parameters
// the driver takes, so it neither refuses a valid one nor lets a typo
// through to CreateVolume, and a new driver parameter fails here until the
// schema names it.
func TestHelmSchemaNamesDriverParams(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(helmChart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	class := schemaAt(t, root, "properties", "storageClasses", "items", "properties")
	got := slices.Collect(maps.Keys(schemaAt(t, root, "properties", "storageClasses", "items", "properties",
		"parameters", "properties")))
	// clusterID and pool are fields of a class entry, not of its parameters.
	for _, k := range []string{config.ParamClusterID, config.ParamPool} {
		if _, ok := class[k]; !ok {
			t.Errorf("schema: storageClasses items have no %s", k)
		}
		got = append(got, k)
	}
	sameNames(t, "storageClasses parameters", got, config.StorageClassParams())
	vac := schemaAt(t, root, "properties", "volumeAttributesClasses", "items", "properties", "parameters", "properties")
	sameNames(t, "volumeAttributesClasses parameters", slices.Collect(maps.Keys(vac)), config.MutableParams())
}

// schemaAt walks the schema from root along keys, following
// "$ref": "#/definitions/<name>" wherever one stands.
func schemaAt(t *testing.T, root map[string]any, keys ...string) map[string]any {
	t.Helper()
	node := root
	for i, k := range keys {
		next, ok := deref(t, root, node)[k].(map[string]any)
		if !ok {
			t.Fatalf("schema: no object at %s", strings.Join(keys[:i+1], "."))
		}
		node = next
	}
	return deref(t, root, node)
}

func deref(t *testing.T, root, node map[string]any) map[string]any {
	t.Helper()
	for range 10 { // a bound, against a $ref cycle
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		defs, _ := root["definitions"].(map[string]any)
		if node, _ = defs[name].(map[string]any); !ok || node == nil {
			t.Fatalf("schema: $ref %q does not name a definition", ref)
		}
	}
	t.Fatal("schema: $ref chain longer than 10")
	return nil
}

// sameNames reports the names only the schema has and those only the
// driver has.
func sameNames(t *testing.T, what string, schema, driver []string) {
	t.Helper()
	for _, k := range schema {
		if !slices.Contains(driver, k) {
			t.Errorf("%s: the schema names %q, which the driver does not take", what, k)
		}
	}
	for _, k := range driver {
		if !slices.Contains(schema, k) {
			t.Errorf("%s: the driver takes %q, which the schema does not name", what, k)
		}
	}
	if len(schema) == 0 {
		t.Errorf("%s: the schema names none", what)
	}
}

// checkClassParams holds the classes' parameters against the driver's own
// parser, so a value the schema lets through but the driver refuses at
// CreateVolume fails here instead.
func checkClassParams(t *testing.T, r *rendered) {
	t.Helper()
	scs, _ := all[*storagev1.StorageClass](r.manifests)
	for _, sc := range scs {
		// ParseParams accepts the reserved csi.storage.k8s.io/ keys (and
		// checks the fstype among them), so the whole map goes in.
		if _, err := config.ParseParams(sc.Parameters); err != nil {
			t.Errorf("StorageClass %s: %v", sc.Name, err)
		}
	}
	mutable := config.MutableParams()
	vacs, _ := all[*storagev1.VolumeAttributesClass](r.manifests)
	for _, vac := range vacs {
		for k := range vac.Parameters {
			if !slices.Contains(mutable, k) {
				t.Errorf("VolumeAttributesClass %s: parameter %q is not one of %v", vac.Name, k, mutable)
			}
		}
	}
}

// helmSanity holds cheap checks that a value file's settings took effect,
// by the file's name.
var helmSanity = map[string]func(*testing.T, *rendered){
	"full.yaml": func(t *testing.T, r *rendered) {
		// The tenant's encrypted class names its own KEK Secret; the
		// controller mounts secrets.keks; the sidecars may get both.
		scs, _ := all[*storagev1.StorageClass](r.manifests)
		ceph := cephSecrets(t, r.manifests)
		if sc := findNamed(scs, "", "tenant-a"); sc == nil {
			t.Error("no StorageClass tenant-a")
		} else if kek := checkClassSecrets(t, "StorageClass tenant-a", sc.Parameters, ceph); kek != "rbdcsi/tenant-a-keks" {
			t.Errorf("StorageClass tenant-a: KEK Secret %q, want its keySecret rbdcsi/tenant-a-keks", kek)
		}
		if got := kekMounts(t, r.manifests); !got["rbdcsi/storage-keks"] || len(got) != 1 {
			t.Errorf("the controller mounts KEK Secrets %v, want secrets.keks rbdcsi/storage-keks", got)
		}
		if got := secretsReadableBy(t, r.manifests); !maps.Equal(got, map[string]bool{"rbdcsi/storage-keks": true, "rbdcsi/tenant-a-keks": true}) {
			t.Errorf("the controller may get Secrets %v, want secrets.keks and the tenant's keySecret", got)
		}
		want := "/var/lib/k0s/kubelet/plugins/rbd.example.org/csi.sock"
		registers := false
		for _, w := range workloads(r.manifests) {
			for _, c := range w.spec.Containers {
				if n := imageName(c.Image); n == "csi-node-driver-registrar" || n == "livenessprobe" {
					t.Errorf("%s: runs %s (%s), which full.yaml turns off", w.name, c.Name, c.Image)
				}
				registers = registers || c.Name == "rbdplugin" && mustFlags(t, c)["kubelet-registration-path"] == want
			}
		}
		if !registers {
			t.Errorf("no rbdplugin container has --kubelet-registration-path=%s", want)
		}
		if len(r.monitors) != 2 {
			t.Errorf("%d ServiceMonitors, want 2 (controller and node)", len(r.monitors))
		}
		// The tenant's clusterID keeps its volumes in its RADOS namespace.
		cms, _ := all[*corev1.ConfigMap](r.manifests)
		for _, cm := range cms {
			clusters, err := cluster.ParseMap([]byte(cm.Data["cluster-config.json"]))
			if err != nil {
				t.Fatalf("ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err)
			}
			i := slices.IndexFunc(clusters, func(c cluster.Cluster) bool { return c.ClusterID == "west-tenant-a" })
			if i < 0 || clusters[i].Namespace() != "tenant-a" {
				t.Errorf("ConfigMap %s/%s: no cluster west-tenant-a in RADOS namespace tenant-a: %s", cm.Namespace, cm.Name, cm.Data["cluster-config.json"])
			}
		}
		// fullnameOverride names every object the chart names itself.
		for _, w := range workloads(r.manifests) {
			if !strings.HasPrefix(w.name, "Deployment/storage-rbd-") && !strings.HasPrefix(w.name, "DaemonSet/storage-rbd-") {
				t.Errorf("%s: not named after fullnameOverride storage-rbd", w.name)
			}
		}
		// In the hosts' network, each listener binds the pod's address,
		// but the snapshot-metadata sidecar's gRPC port, which cannot.
		for _, w := range workloads(r.manifests) {
			for _, c := range w.spec.Containers {
				for flag, addr := range mustFlags(t, c) {
					if !w.spec.HostNetwork || !slices.Contains([]string{"http-endpoint", "metrics-address", "health-address"}, flag) {
						continue
					}
					host, _, err := net.SplitHostPort(addr)
					if err == nil {
						host, err = expandEnv(c, host, map[string]string{"status.podIP": "192.0.2.1"})
					}
					if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
						t.Errorf("%s/%s: --%s=%s does not bind one address of the node (%v)", w.name, c.Name, flag, addr, err)
					}
				}
			}
		}
		// Changed-block tracking with a certificate of the site's: its
		// Secret, the CA and the audience the values give.
		sms, secret, rendered := checkSnapshotMetadata(t, r.manifests)
		if secret != "snapshot-metadata-cert" || rendered {
			t.Errorf("the sidecar's certificate is Secret %s (rendered: %v), want the values' snapshot-metadata-cert, made before", secret, rendered)
		}
		if block, _ := pem.Decode(sms.Spec.CACert); block == nil || block.Type != "CERTIFICATE" {
			t.Errorf("SnapshotMetadataService %s: caCert is not the values' PEM certificate: %q", sms.Name, sms.Spec.CACert)
		}
		if sms.Name != "rbd.example.org" || sms.Spec.Audience != "backup.example.org" || sms.Spec.Address != "storage-rbd-snapshot-metadata.rbdcsi:6443" {
			t.Errorf("SnapshotMetadataService %s: audience %s, address %s; want the values' driver name, audience and fullnameOverride",
				sms.Name, sms.Spec.Audience, sms.Spec.Address)
		}
	},
	"snapshot-metadata.yaml": func(t *testing.T, r *rendered) {
		// The chart's own certificate, for its Service's names
		// (checkSnapshotMetadata verifies it), and the driver name as
		// the audience.
		sms, secret, rendered := checkSnapshotMetadata(t, r.manifests)
		if !rendered {
			t.Errorf("the chart renders no Secret %s of the sidecar's certificate", secret)
		}
		if sms.Spec.Audience != "rbd.csi.rbdcsi.dev" {
			t.Errorf("SnapshotMetadataService %s: audience %q, want the driver name", sms.Name, sms.Spec.Audience)
		}
	},
	"minimal.yaml": func(t *testing.T, r *rendered) {
		// The default classes, in the pool given, beside the registry.
		scs, _ := all[*storagev1.StorageClass](r.manifests)
		var names []string
		for _, sc := range scs {
			names = append(names, sc.Name)
			if sc.Parameters["clusterID"] != "ceph1" || sc.Parameters["pool"] != "kubernetes" {
				t.Errorf("StorageClass %s: %s/%s, want the only cluster and the pool of minimal.yaml (ceph1/kubernetes)",
					sc.Name, sc.Parameters["clusterID"], sc.Parameters["pool"])
			}
		}
		if slices.Sort(names); !slices.Equal(names, []string{"rbdcsi-block", "rbdcsi-ext4", "rbdcsi-xfs"}) {
			t.Errorf("StorageClasses %v, want rbdcsi-block, rbdcsi-ext4 and rbdcsi-xfs", names)
		}
		for _, w := range workloads(r.manifests) {
			if got := mustFlags(t, pluginContainer(t, w.spec))["node-registry"]; got != "ceph1/kubernetes" {
				t.Errorf("%s: --node-registry=%s, want ceph1/kubernetes (the first cluster and the pool)", w.name, got)
			}
		}
		// Existing Secrets and namespace: none is rendered.
		for _, o := range r.objects {
			if o.gvk.Kind == "Secret" || o.gvk.Kind == "Namespace" {
				t.Errorf("%s: rendered, though the Secrets and the namespace are made before helm install", o)
			}
		}
	},
}

// imageName is the last path element of an image, without tag or digest.
func imageName(image string) string {
	repo, _, _ := strings.Cut(image, "@")
	repo, _ = imageRepo(repo)
	return path.Base(repo)
}
