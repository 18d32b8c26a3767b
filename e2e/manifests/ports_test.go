package manifests

import (
	"net"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestHealthAndMetricsWiring: the plugin's livenessProbe asks the
// livenessprobe sidecar's port; --metrics-address is the port named
// "metrics"; the sidecars' probes hit their own --http-endpoint; no two
// listeners share a port in a pod; Services select the pods and name their
// ports.
func TestHealthAndMetricsWiring(t *testing.T) { eachInstall(t, checkWiring) }

func checkWiring(t *testing.T, m *manifests) {
	t.Helper()
	ws := workloads(m)
	for _, w := range ws {
		plugin := oneContainer(t, w, pluginRepo)
		liveness := oneContainer(t, w, livenessRepo)

		listening := map[int32]string{} // port -> container
		listen := func(c corev1.Container, flag string) int32 {
			addr, ok := mustFlags(t, c)[flag]
			if !ok {
				return 0
			}
			// The snapshot-metadata sidecar's gRPC --port takes no
			// address: it listens on every one, in the host's network too
			// (the chart's README says so).
			grpcPort := flag == "port"
			if grpcPort {
				addr = ":" + addr
			}
			// The csi-addons sidecar listens on --controller-ip (every
			// address when empty) and --controller-port. The manifests
			// leave --controller-ip out: with it, v0.13.0 records an
			// endpoint (<ip>:<port>) its controller cannot parse (only
			// pod://<pod>.<namespace>:<port>). So in the hosts' network it
			// listens on every address of the node; TLS and a token
			// checked on every call guard it (docs/csi-addons.md).
			addonsPort := flag == "controller-port"
			if addonsPort {
				addr = mustFlags(t, c)["controller-ip"] + ":" + addr
			}
			port, err := listenPort(addr)
			if err != nil {
				t.Errorf("%s/%s: --%s=%s: %v", w.name, c.Name, flag, addr, err)
				return 0
			}
			// In the host's network namespace, ":port" would listen on
			// every interface of the node.
			if host, _, _ := net.SplitHostPort(addr); !grpcPort && !addonsPort && w.spec.HostNetwork && (host == "" || host == "0.0.0.0" || host == "::") {
				t.Errorf("%s/%s: --%s=%s listens on every interface of the node: use $(POD_IP) or 127.0.0.1", w.name, c.Name, flag, addr)
			}
			if other, dup := listening[port]; dup {
				t.Errorf("%s: %s and %s both listen on port %d", w.name, other, c.Name, port)
			}
			listening[port] = c.Name
			return port
		}
		healthz := listen(liveness, "http-endpoint")
		if healthz == 0 {
			t.Errorf("%s/%s: needs --http-endpoint", w.name, liveness.Name)
		}
		metricsPort := listen(plugin, "metrics-address")
		for _, c := range w.spec.Containers {
			if c.Name == plugin.Name || c.Name == liveness.Name {
				continue
			}
			listen(c, "port")
			listen(c, "controller-port")
			p := listen(c, "http-endpoint")
			for what, probe := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
				if probe == nil {
					continue
				}
				if got, _, err := probePort(c, probe); err != nil || got != p {
					t.Errorf("%s/%s: %s port %d, --http-endpoint port %d (%v)", w.name, c.Name, what, got, p, err)
				}
			}
		}

		got, probePath, err := probePort(plugin, plugin.LivenessProbe)
		if err != nil {
			t.Errorf("%s: plugin: %v", w.name, err)
		} else if got != healthz || probePath != "/healthz" {
			t.Errorf("%s: plugin livenessProbe is %s on port %d; the livenessprobe sidecar serves /healthz on %d", w.name, probePath, got, healthz)
		}

		if metricsPort == 0 {
			t.Errorf("%s: plugin has no --metrics-address", w.name)
		} else if p, err := containerPort(plugin, "metrics", 0); err != nil || p != metricsPort {
			t.Errorf("%s: plugin port \"metrics\" is %d, --metrics-address port is %d (%v)", w.name, p, metricsPort, err)
		}

		names := map[string]bool{}
		for _, c := range w.spec.Containers {
			for _, p := range c.Ports {
				if p.Name == "" || names[p.Name] {
					t.Errorf("%s/%s: port %d has an empty or repeated name %q", w.name, c.Name, p.ContainerPort, p.Name)
				}
				names[p.Name] = true
				if _, ok := listening[p.ContainerPort]; !ok {
					t.Errorf("%s/%s: declares port %d (%s), which nothing listens on", w.name, c.Name, p.ContainerPort, p.Name)
				}
			}
		}
	}

	svcs, _ := all[*corev1.Service](m)
	if len(svcs) == 0 {
		t.Error("no Service exposes the metrics")
	}
	for _, svc := range svcs {
		var matched *workload
		for i := range ws {
			if ws[i].namespace == svc.Namespace && len(svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ws[i].labels)) {
				if matched != nil {
					t.Errorf("Service %s selects both %s and %s", svc.Name, matched.name, ws[i].name)
				}
				matched = &ws[i]
			}
		}
		if matched == nil {
			t.Errorf("Service %s selects no workload", svc.Name)
			continue
		}
		// The target is a named port of one of the pod's containers.
		for _, p := range svc.Spec.Ports {
			if !slices.ContainsFunc(matched.spec.Containers, func(c corev1.Container) bool {
				_, err := containerPort(c, p.TargetPort.String(), 0)
				return err == nil
			}) {
				t.Errorf("Service %s port %s: target %s is no named port of %s", svc.Name, p.Name, p.TargetPort.String(), matched.name)
			}
		}
	}
}
