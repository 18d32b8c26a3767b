package manifests

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/yaml"
)

// The files of deploy/snapshot-metadata: the patch of the controller, and
// the certificate's files a site writes, which are not shipped.
var (
	snapMetaPatch = "controller.yaml"
	snapMetaCerts = []string{"tls.crt", "tls.key", "ca.crt", "ca.crt.base64"}
)

// snapshotMetadataClientRules are what a backup tool needs, as
// external-snapshot-metadata v1.1.0 documents it
// (deploy/snapshot-metadata-client-cluster-role.yaml there).
var snapshotMetadataClientRules = []rule{
	{"snapshot.storage.k8s.io", "volumesnapshots", []string{"get", "list", "watch"}},
	{"snapshot.storage.k8s.io", "volumesnapshotcontents", []string{"get", "list", "watch"}},
	{"cbt.storage.k8s.io", "snapshotmetadataservices", []string{"get", "list"}},
	{"", "serviceaccounts/token", []string{"create", "get"}},
}

// snapMetaResources are the files deploy/snapshot-metadata's
// kustomization lists as resources.
func snapMetaResources(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(snapMetaDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", snapMetaDir, err)
	}
	return k.Resources
}

// snapshotMetadataObjects are the objects deploy/snapshot-metadata adds:
// those of the files its kustomization lists, and the TLS Secret it
// generates. Only kinds and names are read: the object's caCert is a
// placeholder until the build puts the CA there.
func snapshotMetadataObjects(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"Secret rbdcsi/rbdcsi-snapshot-metadata-tls": true}
	for _, f := range snapMetaResources(t) {
		data, err := os.ReadFile(filepath.Join(snapMetaDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(data) {
			var o struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &o); err != nil || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s/%s#%d: no kind and name (%v)", snapMetaDir, f, i, err)
			}
			out[o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name] = true
		}
	}
	return out
}

// TestSnapshotMetadataComponent: deploy/snapshot-metadata's kustomization
// lists every file but its patch; the certificate's files are not shipped,
// .gitignore keeps them out of git, and a build without one fails naming
// it; built into an install, it wires backup tools to the sidecar
// (checkSnapshotMetadata) with the driver name as the audience; and the
// backup tools' ClusterRole is what upstream documents, bound to no one.
func TestSnapshotMetadataComponent(t *testing.T) {
	listed := snapMetaResources(t)
	for _, f := range yamlFiles(t, snapMetaDir) {
		if name := filepath.Base(f); !isKustomization(f) && name != snapMetaPatch && !slices.Contains(listed, name) {
			t.Errorf("%s is not listed in the kustomization's resources", f)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(snapMetaDir, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	fsys := deployFS(t, nil)
	for _, name := range snapMetaCerts {
		if !slices.Contains(strings.Fields(string(ignore)), name) {
			t.Errorf("%s/.gitignore does not list %s", snapMetaDir, name)
		}
		if _, err := os.Stat(filepath.Join(snapMetaDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/%s is in the tree (%v): the site makes its certificate, none is shipped", snapMetaDir, name, err)
		}
		content, err := fsys.ReadFile("/deploy/" + snapMetaDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := fsys.RemoveAll("/deploy/" + snapMetaDir + "/" + name); err != nil {
			t.Fatal(err)
		}
		_, err = krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/deploy/installed-cbt")
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("the component without %s: %v, want a failure naming it", name, err)
		}
		if err := fsys.WriteFile("/deploy/"+snapMetaDir+"/"+name, content); err != nil {
			t.Fatal(err)
		}
	}

	m := installedWithSnapshotMetadata(t)
	sms, secret, rendered := checkSnapshotMetadata(t, m)
	if sms.Spec.Audience != sms.Name {
		t.Errorf("SnapshotMetadataService %s: audience %q, want the driver name", sms.Name, sms.Spec.Audience)
	}
	if !rendered {
		t.Errorf("the build has no Secret %s of the sidecar's certificate", secret)
	}
	checkClientRole(t, m, "rbdcsi-snapshot-metadata-client")
}

// checkSnapshotMetadata: backup tools reach the sidecar as the one
// SnapshotMetadataService says: it is named after the CSIDriver; its
// address, <service>.<namespace>:<port>, is a Service port that leads to
// the --port of the controller pods' csi-snapshot-metadata container,
// whose --tls-cert and --tls-key are the files of a Secret volume, mounted
// read-only. When that Secret is among the objects (not made before the
// install), its certificate serves the address's names under the object's
// CA, which is the Secret's ca.crt. It returns the object, the Secret's
// name and whether the Secret is among the objects.
func checkSnapshotMetadata(t *testing.T, m *manifests) (sms *snapshotMetadataService, secret string, rendered bool) {
	t.Helper()
	sms = only[*snapshotMetadataService](t, m, "SnapshotMetadataService")
	if driver := only[*storagev1.CSIDriver](t, m, "CSIDriver"); sms.Name != driver.Name {
		t.Errorf("SnapshotMetadataService %s: not named after the driver %s (the sidecar gets it by that name)", sms.Name, driver.Name)
	}
	host, port, err := net.SplitHostPort(sms.Spec.Address)
	svcName, ns, _ := strings.Cut(host, ".")
	if err != nil || ns == "" || strings.Contains(ns, ".") {
		t.Fatalf("SnapshotMetadataService %s: address %q is not <service>.<namespace>:<port> (%v)", sms.Name, sms.Spec.Address, err)
	}
	svcs, _ := all[*corev1.Service](m)
	svc := findNamed(svcs, ns, svcName)
	if svc == nil {
		t.Fatalf("SnapshotMetadataService %s: address %s: no Service %s/%s", sms.Name, sms.Spec.Address, ns, svcName)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port })
	if i < 0 {
		t.Fatalf("SnapshotMetadataService %s: Service %s has no port %s", sms.Name, svc.Name, port)
	}
	target := svc.Spec.Ports[i].TargetPort
	var w *workload
	for _, x := range workloads(m) {
		if x.namespace == ns && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(x.labels)) {
			if w != nil {
				t.Fatalf("Service %s selects %s and %s", svc.Name, w.name, x.name)
			}
			w = &x
		}
	}
	if w == nil {
		t.Fatalf("Service %s/%s selects no workload", ns, svc.Name)
	}
	i = slices.IndexFunc(w.spec.Containers, func(c corev1.Container) bool { return c.Name == "csi-snapshot-metadata" })
	if i < 0 {
		t.Fatalf("%s: no container csi-snapshot-metadata", w.name)
	}
	sidecar := w.spec.Containers[i]
	flags := mustFlags(t, sidecar)
	name := ""
	if target.Type == intstr.String {
		name = target.StrVal
	}
	if p, err := containerPort(sidecar, name, target.IntVal); err != nil || strconv.Itoa(int(p)) != flags["port"] {
		t.Errorf("Service %s port %s leads to %s port %d (%v), the sidecar serves --port=%s", svc.Name, port, sidecar.Name, p, err, flags["port"])
	}

	files := map[string]string{}
	var volume corev1.Volume
	for _, f := range []struct{ flag, key string }{{"tls-cert", "tls.crt"}, {"tls-key", "tls.key"}} {
		v, mnt, rel, err := resolve(w.spec, sidecar, flags[f.flag])
		switch {
		case err != nil:
			t.Fatalf("%s/%s: --%s: %v", w.name, sidecar.Name, f.flag, err)
		case v.Secret == nil || !mnt.ReadOnly || len(v.Secret.Items) > 0:
			t.Fatalf("%s/%s: --%s=%s is not on a read-only Secret volume of its keys", w.name, sidecar.Name, f.flag, flags[f.flag])
		case volume.Name != "" && v.Name != volume.Name:
			t.Errorf("%s/%s: the certificate and the key are on volumes %s and %s", w.name, sidecar.Name, volume.Name, v.Name)
		}
		volume, files[f.key] = v, rel
	}
	secrets, _ := all[*corev1.Secret](m)
	s := findNamed(secrets, w.namespace, volume.Secret.SecretName)
	if s == nil {
		return sms, volume.Secret.SecretName, false
	}
	data := secretData(s)
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s: type %q, want %s", s.Name, s.Type, corev1.SecretTypeTLS)
	}
	if string(sms.Spec.CACert) != data["ca.crt"] || data["ca.crt"] == "" {
		t.Errorf("SnapshotMetadataService %s: caCert is not the ca.crt of Secret %s", sms.Name, s.Name)
	}
	checkServingCert(t, "Secret "+s.Name, []byte(data[files["tls.crt"]]), []byte(data[files["tls.key"]]), sms.Spec.CACert, host)
	return sms, s.Name, true
}

// checkClientRole: the ClusterRole name grants backup tools what upstream
// documents and no more, and nothing binds it: each site binds it to its
// backup tools' accounts.
func checkClientRole(t *testing.T, m *manifests, name string) {
	t.Helper()
	crs, _ := all[*rbacv1.ClusterRole](m)
	cr := findNamed(crs, "", name)
	if cr == nil {
		t.Fatalf("no ClusterRole %s", name)
	}
	want := map[grant]bool{}
	for _, r := range snapshotMetadataClientRules {
		for _, v := range r.verbs {
			want[grant{"", r.group, r.resource, v}] = true
		}
	}
	has := ruleGrants(cr.Rules)
	for g := range want {
		if !has[g] {
			t.Errorf("ClusterRole %s lacks %s", name, g)
		}
	}
	for g := range has {
		if !want[g] {
			t.Errorf("ClusterRole %s grants %s, which backup tools do not need", name, g)
		}
	}
	crbs, _ := all[*rbacv1.ClusterRoleBinding](m)
	rbs, _ := all[*rbacv1.RoleBinding](m)
	for _, b := range crbs {
		if b.RoleRef.Name == name {
			t.Errorf("ClusterRoleBinding %s binds %s, which is for the site's backup tools", b.Name, name)
		}
	}
	for _, b := range rbs {
		if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == name {
			t.Errorf("RoleBinding %s/%s binds %s, which is for the site's backup tools", b.Namespace, b.Name, name)
		}
	}
}
