//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// baseManifests is deploy/kubernetes as users apply it, without the site
// and the e2e's component.
const baseManifests = "../../deploy/kubernetes"

// TestControllerAdmittedUnderRestricted: the API server's own Pod Security
// admission admits the shipped controller pod in a namespace that enforces
// "restricted", and refuses the node plugin's pod there: a dry run of the
// base's own pods. The install runs both in one "privileged" namespace
// (deploy/kubernetes/namespace.yaml), so only this holds the controller's
// pod to "restricted".
func TestControllerAdmittedUnderRestricted(t *testing.T) {
	scenario(t)
	k := newKube(t, "podsecurity")
	k.must("label", "namespace", k.ns, "pod-security.kubernetes.io/enforce=restricted")

	var ctrl appsv1.Deployment
	var node appsv1.DaemonSet
	for _, doc := range strings.Split(k.must("kustomize", baseManifests), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			mustUnmarshal(t, doc, &ctrl)
		case "DaemonSet":
			mustUnmarshal(t, doc, &node)
		}
	}
	if ctrl.Name == "" || node.Name == "" {
		t.Fatalf("kubectl kustomize %s: no Deployment or no DaemonSet", baseManifests)
	}

	if out, err := k.dryRunPod("controller", ctrl.Spec.Template); err != nil {
		t.Errorf("the controller pod is refused under restricted: %v", err)
	} else {
		t.Logf("controller pod admitted: %s", strings.TrimSpace(out))
	}
	// The control: the same admission must refuse a privileged pod, or
	// the check above proved nothing.
	if _, err := k.dryRunPod("node", node.Spec.Template); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("the node plugin's pod under restricted: %v, want a PodSecurity refusal", err)
	}
}

// dryRunPod asks the API server to admit a pod of template (with its
// service account created, since the admission chain looks it up) without
// creating it.
func (k *kube) dryRunPod(name string, tmpl corev1.PodTemplateSpec) (string, error) {
	k.t.Helper()
	if sa := tmpl.Spec.ServiceAccountName; sa != "" {
		k.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: " + sa + "}\n")
	}
	// The node's priority class is reserved for kube-system on some
	// clusters: leave it out so only Pod Security can refuse the pod.
	tmpl.Spec.PriorityClassName = ""
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: tmpl.Labels},
		Spec:       tmpl.Spec,
	}
	manifest, err := json.Marshal(pod)
	if err != nil {
		k.t.Fatal(err)
	}
	return k.run(shortWait, string(manifest), "create", "--dry-run=server", "-f", "-")
}

func mustUnmarshal(t *testing.T, doc string, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		t.Fatal(err)
	}
}
