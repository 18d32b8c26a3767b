//go:build helm

// The chart's csi-addons sidecars (csiAddons) against the kustomize
// component deploy/csi-addons, and the checks of what runs, on the
// chart's render.

package manifests

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	psa "k8s.io/pod-security-admission/api"
)

// withCSIAddons are the value files of deploy/site's settings with the
// csi-addons sidecars, then more values, if any, over them.
func withCSIAddons(t *testing.T, more string) []string {
	t.Helper()
	files := []string{filepath.Join(helmValuesDir, "site.yaml"), writeValues(t, "csiAddons: {enabled: true}")}
	if more != "" {
		files = append(files, writeValues(t, more))
	}
	return files
}

// TestHelmRendersCSIAddons: with csiAddons.enabled over
// helm/values/site.yaml, the chart renders exactly what an install with
// kustomize applies with deploy/csi-addons (less the release namespace),
// field for field; and a changed port, Secret name or node's kubelet
// directory shows as a difference.
func TestHelmRendersCSIAddons(t *testing.T) {
	want := comparableObjects(t, installedWithCSIAddons(t), false)
	chart := renderValues(t, withCSIAddons(t, "")...)
	for _, p := range compareObjects(want, comparableObjects(t, chart.manifests, true)) {
		t.Error(p)
	}
	t.Logf("compared %d objects", len(want))
	t.Run("detects drift", func(t *testing.T) {
		for _, tc := range []struct{ name, overlay, want string }{
			{"port", "csiAddons: {port: 9071}", "DaemonSet rbdcsi/rbdcsi-node: spec.template.spec.containers[3]"},
			{"fence Secret", "csiAddons: {fenceSecret: other}", "Role rbdcsi/rbdcsi-csi-addons: rules[3]"},
			{"replication Secret", "csiAddons: {replicationSecret: other}", "Role rbdcsi/rbdcsi-csi-addons: rules[3]"},
			{"disabled", "csiAddons: {enabled: false}", "ClusterRole /rbdcsi-csi-addons: not rendered"},
		} {
			chart := renderValues(t, withCSIAddons(t, tc.overlay)...)
			problems := compareObjects(want, comparableObjects(t, chart.manifests, true))
			t.Logf("%s:\n%s", tc.name, strings.Join(problems, "\n"))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s: no problem containing %q (the problems are logged above)", tc.name, tc.want)
			}
		}
	})
}

// TestHelmCSIAddonsRuns: the checks of what runs that hold for
// kustomize's installs hold for the chart's render with
// csiAddons.enabled, also with the controller in the hosts' network
// (where the sidecar must listen on the node's address only).
func TestHelmCSIAddonsRuns(t *testing.T) {
	for _, more := range []string{"", "controller: {hostNetwork: true}"} {
		m := renderValues(t, withCSIAddons(t, more)...).manifests
		for name, check := range map[string]func(*testing.T, *manifests){
			"pod security": func(t *testing.T, m *manifests) {
				checkPodSecurity(t, m, map[string]psa.Level{helmNamespace: psa.LevelPrivileged})
			},
			"wiring":           checkWiring,
			"tokens":           checkTokens,
			"rbac":             checkRBAC,
			"rbac per sidecar": checkRBACPerSidecar,
			"sockets":          checkSocketPaths,
			"secret reader":    checkSecretReader,
			"build":            func(t *testing.T, m *manifests) { checkCSIAddonsBuild(t, "the chart", m) },
		} {
			t.Run(more+" "+name, func(t *testing.T) { check(t, m) })
		}
	}
}
