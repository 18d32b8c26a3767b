package manifests

import (
	"path"
	"strings"
	"testing"
)

// kubeletPluginsDir is where kubelet expects CSI sockets (and keeps staging
// paths), kubeletRegistryDir where it watches for registration sockets,
// kubeletPodsDir where the pods' target paths are.
const (
	kubeletDir         = "/var/lib/kubelet"
	kubeletPluginsDir  = kubeletDir + "/plugins"
	kubeletRegistryDir = kubeletDir + "/plugins_registry"
	kubeletPodsDir     = kubeletDir + "/pods"
)

// TestSocketPaths: in every pod the plugin listens where each sidecar
// connects, on a volume they share; the registrar tells kubelet the host
// path of that same socket and registers in kubelet's registry.
func TestSocketPaths(t *testing.T) { eachInstall(t, checkSocketPaths) }

func checkSocketPaths(t *testing.T, m *manifests) {
	t.Helper()
	ws := workloads(m)
	if len(ws) != 2 {
		t.Fatalf("%d workloads, want the controller Deployment and the node DaemonSet", len(ws))
	}
	for _, w := range ws {
		plugin := oneContainer(t, w, pluginRepo)
		endpoint, err := unixPath(mustFlags(t, plugin)["endpoint"])
		if err != nil {
			t.Fatalf("%s: plugin --endpoint: %v", w.name, err)
		}
		sockVol, _, sockRel, err := resolve(w.spec, plugin, endpoint)
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if sockVol.EmptyDir == nil && sockVol.HostPath == nil {
			t.Errorf("%s: the socket is on volume %s, neither an emptyDir nor a hostPath", w.name, sockVol.Name)
		}
		clients := 0
		for _, c := range w.spec.Containers {
			// The csi-addons sidecar talks to the plugin's csi-addons
			// socket, which the plugin serves with --csi-addons-endpoint.
			flag, serve := "csi-address", endpoint
			if _, ok := mustFlags(t, c)["csi-addons-address"]; ok {
				flag = "csi-addons-address"
				var err error
				if serve, err = unixPath(mustFlags(t, plugin)["csi-addons-endpoint"]); err != nil {
					t.Errorf("%s/%s: the plugin's --csi-addons-endpoint: %v", w.name, c.Name, err)
					continue
				}
			}
			addr, ok := mustFlags(t, c)[flag]
			if !ok {
				continue
			}
			clients++
			p, err := unixPath(addr)
			if err != nil {
				t.Errorf("%s/%s: --%s: %v", w.name, c.Name, flag, err)
				continue
			}
			v, _, rel, err := resolve(w.spec, c, p)
			if err != nil {
				t.Errorf("%s: %v", w.name, err)
				continue
			}
			wantVol, _, wantRel, err := resolve(w.spec, plugin, serve)
			if err != nil {
				t.Errorf("%s: %v", w.name, err)
				continue
			}
			if v.Name != wantVol.Name || rel != wantRel {
				t.Errorf("%s/%s: --%s=%s is %s:%s, the plugin listens on %s:%s",
					w.name, c.Name, flag, addr, v.Name, rel, wantVol.Name, wantRel)
			}
		}
		// Every container but the plugin talks to it.
		if clients != len(w.spec.Containers)-1 {
			t.Errorf("%s: %d of %d sidecars have --csi-address", w.name, clients, len(w.spec.Containers)-1)
		}

		for _, reg := range containers(w.spec, registrarRepo) {
			if sockVol.HostPath == nil {
				t.Fatalf("%s: kubelet cannot reach a socket on non-hostPath volume %s", w.name, sockVol.Name)
			}
			hostSock := path.Join(sockVol.HostPath.Path, sockRel)
			if got := mustFlags(t, reg)["kubelet-registration-path"]; got != hostSock {
				t.Errorf("%s/%s: --kubelet-registration-path=%s, the plugin's socket is %s on the host", w.name, reg.Name, got, hostSock)
			}
			if !strings.HasPrefix(hostSock, kubeletPluginsDir+"/") {
				t.Errorf("%s: the plugin socket %s is not under %s", w.name, hostSock, kubeletPluginsDir)
			}
			// The registrar creates its socket in /registration.
			v, _, rel, err := resolve(w.spec, reg, "/registration")
			if err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if v.HostPath == nil || path.Clean(path.Join(v.HostPath.Path, rel)) != kubeletRegistryDir {
				t.Errorf("%s/%s: /registration is not the host's %s", w.name, reg.Name, kubeletRegistryDir)
			}
		}
	}
}
