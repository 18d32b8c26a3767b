//go:build helm

// The chart's classes carry no Ceph credentials; an encrypted class names
// its KEK Secret (keySecret), which the secret-reader Role names beside the
// KEK Secret the controller mounts for the rotation (secrets.keks).

package manifests

import (
	"maps"
	"slices"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// renderIn renders the chart as release rbdcsi in namespace ns with the
// value files, for a cluster with every CRD the chart may need.
func renderIn(t *testing.T, ns string, valueFiles ...string) *manifests {
	t.Helper()
	args := []string{"template", helmRelease, helmChart, "-n", ns, "--kube-version", helmKubeVersion}
	for _, k := range helmCRDKinds {
		args = append(args, "--api-versions", k)
	}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	m := &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), out, func([]byte) string { return ns }, nil)}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// secretReaderNames is the resourceNames of the Role <release>-secret-reader.
func secretReaderNames(t *testing.T, m *manifests, ns string) []string {
	t.Helper()
	roles, _ := all[*rbacv1.Role](m)
	r := findNamed(roles, ns, helmRelease+"-secret-reader")
	if r == nil {
		t.Fatalf("no Role %s/%s-secret-reader", ns, helmRelease)
	}
	var names []string
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, "secrets") {
			names = append(names, rule.ResourceNames...)
		}
	}
	return names
}

// secretParams are a class's csi.storage.k8s.io/*-secret-* parameters.
func secretParams(params map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range params {
		if strings.HasPrefix(k, "csi.storage.k8s.io/") && strings.Contains(k, "-secret-") {
			out[k] = v
		}
	}
	return out
}

// TestHelmKEKSecrets: with the defaults, no class names a Secret, the
// controller mounts secrets.keks (rbdcsi-keks, optional) at
// --kms-secret-dir and the Role names it alone. With encrypted classes,
// each names its keySecret, in the release namespace, as exactly its
// provisioner and node-stage secret; the other classes still name none;
// the controller mounts secrets.keks; and the Role names secrets.keks and
// every keySecret, each once. Values without secrets.keks (an upgrade
// with --reuse-values from a chart that had none) mount its default.
func TestHelmKEKSecrets(t *testing.T) {
	site := helmValuesDir + "/site.yaml"
	t.Run("defaults", func(t *testing.T) {
		m := renderIn(t, helmNamespace, site)
		scs, _ := all[*storagev1.StorageClass](m)
		vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
		if len(scs) != 3 || len(vscs) != 1 {
			t.Fatalf("%d StorageClasses and %d VolumeSnapshotClasses, want the 3 and the 1 of the defaults", len(scs), len(vscs))
		}
		for _, sc := range scs {
			if p := secretParams(sc.Parameters); len(p) > 0 {
				t.Errorf("StorageClass %s: secret parameters %v; the chart's classes carry no Ceph credentials", sc.Name, p)
			}
		}
		for _, c := range vscs {
			if len(c.Parameters) > 0 {
				t.Errorf("VolumeSnapshotClass %s: parameters %v; no snapshotter secret", c.Name, c.Parameters)
			}
		}
		checkClassesSecrets(t, m)
		if got, want := kekMounts(t, m), map[string]bool{helmNamespace + "/rbdcsi-keks": true}; !maps.Equal(got, want) {
			t.Errorf("the controller mounts KEK Secrets %v, want %v", got, want)
		}
		if got := secretReaderNames(t, m, helmNamespace); !slices.Equal(got, []string{"rbdcsi-keks"}) {
			t.Errorf("the secret-reader Role names %q, want [rbdcsi-keks]", got)
		}
		checkSecretReader(t, m)
	})

	// An upgrade with --reuse-values keeps the values of a release whose
	// chart had no secrets.keks: its default stands in.
	t.Run("values without secrets.keks", func(t *testing.T) {
		m := renderIn(t, helmNamespace, site, writeValues(t, "secrets: {keks: null}"))
		if got, want := kekMounts(t, m), map[string]bool{helmNamespace + "/rbdcsi-keks": true}; !maps.Equal(got, want) {
			t.Errorf("the controller mounts KEK Secrets %v, want %v", got, want)
		}
		if got := secretReaderNames(t, m, helmNamespace); !slices.Equal(got, []string{"rbdcsi-keks"}) {
			t.Errorf("the secret-reader Role names %q, want [rbdcsi-keks]", got)
		}
	})

	t.Run("encrypted classes", func(t *testing.T) {
		const ns = "storage"
		m := renderIn(t, ns, site, writeValues(t, `secrets: {keks: {name: rotation-keks}}
kms:
  secret: {type: secret, keyPrefix: encryptionKEK}
  tenant-a: {type: secret, keyPrefix: tenantAKEK}
storageClasses:
  - {name: plain, fsType: ext4}
  - {name: enc-a, fsType: ext4, keySecret: tenant-a-keks, parameters: {encrypted: "true", encryptionKMSID: tenant-a}}
  - {name: enc-shared, keySecret: rotation-keks, parameters: {encrypted: "true", encryptionKMSID: secret}}
  - {name: enc-a-xfs, fsType: xfs, keySecret: tenant-a-keks, parameters: {encrypted: "true", encryptionKMSID: tenant-a}}`))
		scs, _ := all[*storagev1.StorageClass](m)
		want := map[string]string{"plain": "", "enc-a": "tenant-a-keks", "enc-shared": "rotation-keks", "enc-a-xfs": "tenant-a-keks"}
		if len(scs) != len(want) {
			t.Errorf("%d StorageClasses, want %d", len(scs), len(want))
		}
		for _, sc := range scs {
			kek, ok := want[sc.Name]
			if !ok {
				t.Errorf("StorageClass %s: not in the values", sc.Name)
				continue
			}
			var wantParams map[string]string
			if kek != "" {
				wantParams = map[string]string{
					"csi.storage.k8s.io/provisioner-secret-name": kek, "csi.storage.k8s.io/provisioner-secret-namespace": ns,
					"csi.storage.k8s.io/node-stage-secret-name": kek, "csi.storage.k8s.io/node-stage-secret-namespace": ns,
				}
			}
			if got := secretParams(sc.Parameters); !maps.Equal(got, wantParams) {
				t.Errorf("StorageClass %s: secret parameters %v, want %v", sc.Name, got, wantParams)
			}
		}
		keks := checkClassesSecrets(t, m)
		if want := map[string]bool{ns + "/tenant-a-keks": true, ns + "/rotation-keks": true}; !maps.Equal(keks, want) {
			t.Errorf("the classes name KEK Secrets %v, want %v", keks, want)
		}
		if got, want := kekMounts(t, m), map[string]bool{ns + "/rotation-keks": true}; !maps.Equal(got, want) {
			t.Errorf("the controller mounts KEK Secrets %v, want secrets.keks: %v", got, want)
		}
		if got := secretReaderNames(t, m, ns); !slices.Equal(got, []string{"rotation-keks", "tenant-a-keks"}) {
			t.Errorf("the secret-reader Role names %q, want [rotation-keks tenant-a-keks]: secrets.keks, then each keySecret once", got)
		}
		checkSecretReader(t, m)
	})
}
