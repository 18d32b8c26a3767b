package manifests

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The images of the containers this deployment runs, by role. The sidecar
// tags are the ones the documented RBAC rules in rbac_test.go come from.
const (
	pluginRepo      = "rbdcsi/rbdplugin"
	sigStorage      = "registry.k8s.io/sig-storage/"
	provisionerRepo = sigStorage + "csi-provisioner"
	attacherRepo    = sigStorage + "csi-attacher"
	resizerRepo     = sigStorage + "csi-resizer"
	snapshotterRepo = sigStorage + "csi-snapshotter"
	registrarRepo   = sigStorage + "csi-node-driver-registrar"
	livenessRepo    = sigStorage + "livenessprobe"
	// With deploy/snapshot-metadata or the chart's snapshotMetadata.
	snapshotMetadataRepo = sigStorage + "csi-snapshot-metadata"
	// With deploy/csi-addons or the chart's csiAddons.
	csiAddonsRepo = "quay.io/csiaddons/k8s-sidecar"
)

// sidecarMajors pins each sidecar's major version (the choice:
// provisioner v6 and resizer v2 need Kubernetes >= 1.34).
var sidecarMajors = map[string]string{
	provisionerRepo: "v6.", attacherRepo: "v4.", resizerRepo: "v2.", snapshotterRepo: "v8.",
	registrarRepo: "v2.", livenessRepo: "v2.", snapshotMetadataRepo: "v1.",
}

// workload is a pod template with where it came from.
type workload struct {
	name      string // Deployment/x or DaemonSet/x
	namespace string
	labels    map[string]string
	spec      corev1.PodSpec
}

func workloads(m *manifests) []workload {
	var out []workload
	deps, _ := all[*appsv1.Deployment](m)
	for _, d := range deps {
		out = append(out, workload{"Deployment/" + d.Name, d.Namespace, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	dss, _ := all[*appsv1.DaemonSet](m)
	for _, d := range dss {
		out = append(out, workload{"DaemonSet/" + d.Name, d.Namespace, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	return out
}

// imageRepo splits "repo:tag" (no digests are used here).
func imageRepo(image string) (repo, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

// containers returns the containers of spec whose image repository is repo.
func containers(spec corev1.PodSpec, repo string) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.Containers {
		if r, _ := imageRepo(c.Image); r == repo {
			out = append(out, c)
		}
	}
	return out
}

func oneContainer(t *testing.T, w workload, repo string) corev1.Container {
	t.Helper()
	cs := containers(w.spec, repo)
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers of %s, want 1", w.name, len(cs), repo)
	}
	return cs[0]
}

// flagArgs parses a container's args, all of the form --name=value or
// --name (a boolean). Anything else is an error: positional arguments and
// "--name value" pairs are not used in these manifests.
func flagArgs(c corev1.Container) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "--") || len(a) < 3 {
			return nil, fmt.Errorf("container %s: argument %q is not --name or --name=value", c.Name, a)
		}
		name, value, hasValue := strings.Cut(a[2:], "=")
		if !hasValue {
			value = "true"
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("container %s: --%s given twice", c.Name, name)
		}
		out[name] = value
	}
	return out, nil
}

func mustFlags(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	f, err := flagArgs(c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// expandEnv substitutes $(VAR) references the way kubelet does, from the
// container's literal and downward-API env; an undefined one is an error.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func expandEnv(c corev1.Container, s string, fieldValues map[string]string) (string, error) {
	var err error
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		for _, e := range c.Env {
			if e.Name != name {
				continue
			}
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				if v, ok := fieldValues[e.ValueFrom.FieldRef.FieldPath]; ok {
					return v
				}
				err = fmt.Errorf("container %s: $(%s) comes from field %s, which this test does not know", c.Name, name, e.ValueFrom.FieldRef.FieldPath)
				return ref
			}
			return e.Value
		}
		err = fmt.Errorf("container %s: $(%s) is not defined in its env", c.Name, name)
		return ref
	})
	return out, err
}

// resolve finds the volume that holds path inside container c: the mount
// with the longest mountPath that is path or a parent of it. rel is path
// inside the volume.
func resolve(spec corev1.PodSpec, c corev1.Container, p string) (vol corev1.Volume, mount corev1.VolumeMount, rel string, err error) {
	p = path.Clean(p)
	best := -1
	for i, m := range c.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if p == mp || strings.HasPrefix(p, mp+"/") || mp == "/" {
			if best < 0 || len(mp) > len(path.Clean(c.VolumeMounts[best].MountPath)) {
				best = i
			}
		}
	}
	if best < 0 {
		return vol, mount, "", fmt.Errorf("container %s: no volume is mounted at %s or above", c.Name, p)
	}
	mount = c.VolumeMounts[best]
	rel = strings.TrimPrefix(strings.TrimPrefix(p, path.Clean(mount.MountPath)), "/")
	if mount.SubPath != "" {
		rel = path.Join(mount.SubPath, rel)
	}
	for _, v := range spec.Volumes {
		if v.Name == mount.Name {
			return v, mount, rel, nil
		}
	}
	return vol, mount, "", fmt.Errorf("container %s mounts volume %q, which the pod does not define", c.Name, mount.Name)
}

// unixPath strips the unix:// scheme the plugin's --endpoint uses; the
// sidecars take a bare path or the same URL.
func unixPath(addr string) (string, error) {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		addr = p
	} else if strings.Contains(addr, "://") {
		return "", fmt.Errorf("address %q is not a unix socket", addr)
	}
	if !path.IsAbs(addr) {
		return "", fmt.Errorf("socket path %q is not absolute", addr)
	}
	return path.Clean(addr), nil
}

// listenPort is the port of a host:port listen address such as ":9808".
func listenPort(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("port %q is not valid", p)
	}
	return int32(n), nil
}

// containerPort resolves a probe's port (a number or the name of one of
// the container's ports).
func containerPort(c corev1.Container, port string, number int32) (int32, error) {
	if port == "" {
		return number, nil
	}
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port)
}

func probePort(c corev1.Container, pr *corev1.Probe) (int32, string, error) {
	if pr == nil || pr.HTTPGet == nil {
		return 0, "", fmt.Errorf("container %s has no httpGet livenessProbe", c.Name)
	}
	name := ""
	if pr.HTTPGet.Port.Type == intstr.String {
		name = pr.HTTPGet.Port.StrVal
	}
	n, err := containerPort(c, name, pr.HTTPGet.Port.IntVal)
	return n, pr.HTTPGet.Path, err
}
