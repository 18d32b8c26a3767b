package manifests

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestControllerRunsRestricted: the controller needs no privilege, so its
// pod meets the `restricted` Pod Security level: non-root, the runtime's
// seccomp profile, no privilege escalation, no capabilities, a read-only
// root filesystem, no host paths. What it mounts from a Secret its user
// can read through fsGroup.
func TestControllerRunsRestricted(t *testing.T) { eachInstall(t, checkControllerRestricted) }

func checkControllerRestricted(t *testing.T, m *manifests) {
	t.Helper()
	found := false
	for _, w := range workloads(m) {
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

// TestNodeSidecarsHardened: beside the privileged node plugin, the
// sidecars (registrar, liveness probe) need root only to reach root-owned
// sockets: no privilege, no capabilities, no escalation, and an image
// they cannot write.
func TestNodeSidecarsHardened(t *testing.T) { eachInstall(t, checkNodeSidecars) }

func checkNodeSidecars(t *testing.T, m *manifests) {
	t.Helper()
	sidecars := 0
	for _, w := range workloads(m) {
		if mustFlags(t, oneContainer(t, w, pluginRepo))["mode"] != "node" {
			continue
		}
		for _, c := range w.spec.Containers {
			if strings.HasPrefix(c.Image, pluginRepo) {
				continue
			}
			sidecars++
			sc := c.SecurityContext
			if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s/%s: want no privilege, no escalation, capabilities dropped, a read-only root filesystem; got %+v", w.name, c.Name, sc)
			}
		}
	}
	if sidecars == 0 {
		t.Fatal("no node sidecar")
	}
}

// TestImageUser: the plugin image runs as the controller's non-root user
// unless told otherwise, and the node plugin, which must be root to map
// and mount, says so; otherwise it would start as that user and fail at
// its first map.
func TestImageUser(t *testing.T) {
	data, err := os.ReadFile("../build/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "USER" {
			user = f[1] // the last stage's is the image's
		}
	}
	uid, gid, ok := strings.Cut(user, ":")
	if !ok || uid == "0" || gid == "0" || strings.Trim(uid+gid, "0123456789") != "" {
		t.Fatalf("build/Dockerfile: USER %q, want a numeric non-root uid:gid (runAsNonRoot can only check a number)", user)
	}
	for _, w := range workloads(installed(t)) {
		plugin := oneContainer(t, w, pluginRepo)
		runAs := func(pick func(*corev1.PodSecurityContext) *int64, pickC func(*corev1.SecurityContext) *int64) string {
			if plugin.SecurityContext != nil && pickC(plugin.SecurityContext) != nil {
				return strconv.FormatInt(*pickC(plugin.SecurityContext), 10)
			}
			if w.spec.SecurityContext != nil && pick(w.spec.SecurityContext) != nil {
				return strconv.FormatInt(*pick(w.spec.SecurityContext), 10)
			}
			return "" // the image's
		}
		u := runAs(func(p *corev1.PodSecurityContext) *int64 { return p.RunAsUser }, func(c *corev1.SecurityContext) *int64 { return c.RunAsUser })
		g := runAs(func(p *corev1.PodSecurityContext) *int64 { return p.RunAsGroup }, func(c *corev1.SecurityContext) *int64 { return c.RunAsGroup })
		want := uid + ":" + gid
		if mustFlags(t, plugin)["mode"] == "node" {
			want = "0:0"
		}
		if u+":"+g != want {
			t.Errorf("%s: the plugin runs as %s:%s (empty: the image's %s), want %s", w.name, u, g, user, want)
		}
	}
}
