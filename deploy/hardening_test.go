package deploy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestControllerRunsRestricted: the controller needs no privilege, so its
// pod meets the `restricted` Pod Security level: non-root, the runtime's
// seccomp profile, no privilege escalation, no capabilities, a read-only
// root filesystem, no host paths. What it mounts from a Secret its user
// can read through fsGroup.
func TestControllerRunsRestricted(t *testing.T) {
	found := false
	for _, w := range workloads(loadAll(t).inDir(kubernetesDir)) {
		if mustFlags(t, oneContainer(t, w, pluginRepo))["mode"] != "controller" {
			continue
		}
		found = true
		psc := w.spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: the pod must run as a non-root user (runAsNonRoot, runAsUser)", w.name)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod needs seccompProfile RuntimeDefault", w.name)
		}
		if w.spec.HostNetwork || w.spec.HostPID || w.spec.HostIPC {
			t.Errorf("%s: host namespaces", w.name)
		}
		for _, v := range w.spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: volume %s is a hostPath", w.name, v.Name)
			}
			if v.Secret != nil && (psc == nil || psc.FSGroup == nil || (v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o040 == 0)) {
				t.Errorf("%s: Secret volume %s must be readable through fsGroup (group read in defaultMode)", w.name, v.Name)
			}
		}
		for _, c := range w.spec.Containers {
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s/%s: no securityContext", w.name, c.Name)
			case sc.Privileged != nil && *sc.Privileged:
				t.Errorf("%s/%s: privileged", w.name, c.Name)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s/%s: allowPrivilegeEscalation must be false", w.name, c.Name)
			case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s/%s: capabilities must drop ALL and add none", w.name, c.Name)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s/%s: readOnlyRootFilesystem must be true", w.name, c.Name)
			}
		}
	}
	if !found {
		t.Fatal("no controller workload")
	}
}
