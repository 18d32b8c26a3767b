package manifests

import (
	"strings"
	"testing"
)

// TestTokensOnlyWhereTheAPIIsCalled: no pod automounts its service
// account token; the sidecars that call the Kubernetes API mount one
// (projected, short-lived), and nothing else does: the plugin has no
// Kubernetes client, and the token of the controller's account can create
// and delete PVs. (The snapshot-metadata sidecar reviews its callers'
// tokens and access, and reads snapshots.)
func TestTokensOnlyWhereTheAPIIsCalled(t *testing.T) { eachInstall(t, checkTokens) }

func checkTokens(t *testing.T, m *manifests) {
	t.Helper()
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	callers := []string{provisionerRepo, attacherRepo, resizerRepo, snapshotterRepo, snapshotMetadataRepo, csiAddonsRepo}
	for _, w := range workloads(m) {
		if a := w.spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: automountServiceAccountToken must be false", w.name)
		}
		for _, c := range w.spec.Containers {
			calls := false
			for _, repo := range callers {
				calls = calls || strings.HasPrefix(c.Image, repo+":")
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath != tokenDir {
					continue
				}
				mounted = true
				v, _, _, err := resolve(w.spec, c, tokenDir)
				if err != nil || v.Projected == nil || !m.ReadOnly {
					t.Errorf("%s/%s: the token must be a read-only projected volume (%v)", w.name, c.Name, err)
					continue
				}
				for _, src := range v.Projected.Sources {
					if tok := src.ServiceAccountToken; tok != nil && (tok.ExpirationSeconds == nil || *tok.ExpirationSeconds > 3607) {
						t.Errorf("%s/%s: the projected token must expire within about an hour", w.name, c.Name)
					}
				}
			}
			if mounted != calls {
				t.Errorf("%s/%s: mounts the API token: %v, calls the API: %v", w.name, c.Name, mounted, calls)
			}
		}
	}
}
