//go:build helm

// The chart's changed-block tracking (snapshotMetadata) against the
// kustomize component deploy/snapshot-metadata, and the checks of what
// runs, on the chart's render.

package manifests

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	psa "k8s.io/pod-security-admission/api"
)

// withSnapshotMetadata are the value files of deploy/site's settings
// with changed-block tracking and the chart's certificate, then more
// values, if any, over them.
func withSnapshotMetadata(t *testing.T, more string) []string {
	t.Helper()
	files := []string{filepath.Join(helmValuesDir, "site.yaml"), writeValues(t, "snapshotMetadata: {enabled: true}")}
	if more != "" {
		files = append(files, writeValues(t, more))
	}
	return files
}

// TestHelmRendersSnapshotMetadata: with snapshotMetadata.enabled over
// helm/values/site.yaml, the chart renders exactly what an install with
// kustomize applies with deploy/snapshot-metadata (less the release
// namespace), field for field, but for the certificate: the chart makes
// its own, where the site gives its files. So each side's certificate must
// serve its Service's names under the CA its SnapshotMetadataService
// carries (checkSnapshotMetadata) before its bytes are set aside.
func TestHelmRendersSnapshotMetadata(t *testing.T) {
	kust := installedWithSnapshotMetadata(t)
	checkSnapshotMetadata(t, kust)
	want := certless(t, comparableObjects(t, kust, false))
	chart := renderValues(t, withSnapshotMetadata(t, "")...)
	if _, secret, rendered := checkSnapshotMetadata(t, chart.manifests); !rendered {
		t.Errorf("the chart renders no Secret %s of the sidecar's certificate", secret)
	}
	for _, p := range compareObjects(want, certless(t, comparableObjects(t, chart.manifests, true))) {
		t.Error(p)
	}
	t.Logf("compared %d objects", len(want))
	// What certless sets aside is the certificate alone: another audience,
	// flag or Secret still shows.
	t.Run("detects drift", func(t *testing.T) {
		for _, tc := range []struct{ name, overlay, want string }{
			{"audience", "snapshotMetadata: {audience: other}", "SnapshotMetadataService /rbd.csi.rbdcsi.dev: spec.audience"},
			{"sidecar flag", "controller: {sidecarLogLevel: 3}", "Deployment rbdcsi/rbdcsi-controller: spec.template.spec.containers[6].args[6]"},
			{"Secret", "snapshotMetadata: {tls: {existingSecret: x, caCert: " + strconv.Quote(testServingCert(t)["ca.crt"]) + "}}",
				"Secret rbdcsi/rbdcsi-snapshot-metadata-tls: not rendered"},
		} {
			chart := renderValues(t, withSnapshotMetadata(t, tc.overlay)...)
			problems := compareObjects(want, certless(t, comparableObjects(t, chart.manifests, true)))
			t.Logf("%s:\n%s", tc.name, strings.Join(problems, "\n"))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s: no problem containing %q (the problems are logged above)", tc.name, tc.want)
			}
		}
	})
}

// certless replaces what differs by design between two certificates with
// a mark: the values of the TLS Secret's data (its keys stay) and the
// SnapshotMetadataService's caCert. Each side has the object; the Secret
// only where it is rendered.
func certless(t *testing.T, objs map[string]map[string]any) map[string]map[string]any {
	t.Helper()
	marked := false
	for key, o := range objs {
		switch {
		case key == "Secret rbdcsi/rbdcsi-snapshot-metadata-tls":
			data, _ := o["data"].(map[string]any)
			for k := range data {
				data[k] = "(certificate)"
			}
		case strings.HasPrefix(key, "SnapshotMetadataService "):
			spec, ok := o["spec"].(map[string]any)
			if !ok {
				t.Fatalf("%s: no spec", key)
			}
			spec["caCert"], marked = "(certificate)", true
		}
	}
	if !marked {
		t.Fatal("no SnapshotMetadataService to set the CA aside in")
	}
	return objs
}

// TestHelmSnapshotMetadataRuns: the checks of what runs that hold for
// kustomize's installs hold for the chart's render with
// snapshotMetadata.enabled: the restricted controller and Pod Security
// (the release namespace, made before `helm install`, being privileged),
// ports, tokens, RBAC, sockets, the Secrets read, and the backup tools'
// role.
func TestHelmSnapshotMetadataRuns(t *testing.T) {
	m := renderValues(t, withSnapshotMetadata(t, "")...).manifests
	for name, check := range map[string]func(*testing.T, *manifests){
		"restricted": checkControllerRestricted,
		"pod security": func(t *testing.T, m *manifests) {
			checkPodSecurity(t, m, map[string]psa.Level{helmNamespace: psa.LevelPrivileged})
		},
		"wiring":           checkWiring,
		"tokens":           checkTokens,
		"rbac":             checkRBAC,
		"rbac per sidecar": checkRBACPerSidecar,
		"sockets":          checkSocketPaths,
		"secret reader":    checkSecretReader,
		"client role":      func(t *testing.T, m *manifests) { checkClientRole(t, m, "rbdcsi-snapshot-metadata-client") },
	} {
		t.Run(name, func(t *testing.T) { check(t, m) })
	}
}

// TestHelmSnapshotMetadataNames: the Service, the address, the names of
// the chart's certificate and the roles follow the release's name; with a
// Secret of the site's, the sidecar mounts it, the chart makes none, and
// the object carries the CA the values give.
func TestHelmSnapshotMetadataNames(t *testing.T) {
	args := []string{"template", "storage", helmChart, "-n", "backup", "--kube-version", helmKubeVersion}
	for _, k := range helmCRDKinds {
		args = append(args, "--api-versions", k)
	}
	for _, f := range withSnapshotMetadata(t, "") {
		args = append(args, "-f", f)
	}
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	m := &manifests{objects: decodeDocuments(t, strictDecoder(newScheme(t)), out, func([]byte) string { return "storage" }, nil)}
	sms, secret, rendered := checkSnapshotMetadata(t, m)
	if sms.Spec.Address != "storage-rbdcsi-snapshot-metadata.backup:6443" || secret != "storage-rbdcsi-snapshot-metadata-tls" || !rendered {
		t.Errorf("release storage in namespace backup: address %s, Secret %s (rendered: %v); want storage-rbdcsi-snapshot-metadata.backup:6443 and its -tls Secret",
			sms.Spec.Address, secret, rendered)
	}
	checkClientRole(t, m, "storage-rbdcsi-snapshot-metadata-client")
	checkRBAC(t, m) // the sidecar's role and binding, under the release's names

	ca := testServingCert(t)["ca.crt"]
	own := renderValues(t, withSnapshotMetadata(t, "snapshotMetadata: {tls: {existingSecret: site-cert, caCert: "+strconv.Quote(ca)+"}}")...)
	sms, secret, rendered = checkSnapshotMetadata(t, own.manifests)
	if secret != "site-cert" || rendered || string(sms.Spec.CACert) != ca {
		t.Errorf("with existingSecret site-cert: the sidecar mounts Secret %s (rendered: %v), the object's CA is the values' one: %v",
			secret, rendered, string(sms.Spec.CACert) == ca)
	}
	secrets, _ := all[*corev1.Secret](own.manifests)
	for _, s := range secrets {
		if s.Type == corev1.SecretTypeTLS {
			t.Errorf("with existingSecret: the chart renders Secret %s too", s.Name)
		}
	}
}
