package manifests

import (
	"maps"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// levels from the least to the most permissive.
var levels = []psa.Level{psa.LevelRestricted, psa.LevelBaseline, psa.LevelPrivileged}

// TestPodSecurity: every namespaced object is in a Namespace the manifests
// create; each Namespace enforces a Pod Security level; the pods of each
// workload pass that level, judged by the Pod Security admission's own
// checks; no Namespace allows more than its most demanding pod needs; and
// the controller's pods meet "restricted", though they share the node
// plugin's "privileged" namespace (deploy/kubernetes/namespace.yaml says
// why).
func TestPodSecurity(t *testing.T) {
	eachInstall(t, func(t *testing.T, m *manifests) { checkPodSecurity(t, m, nil) })
}

// checkPodSecurity checks TestPodSecurity's rules on m, whose namespaces
// are those it holds and, made before the install, those of made.
func checkPodSecurity(t *testing.T, m *manifests, made map[string]psa.Level) {
	t.Helper()
	namespaces, _ := all[*corev1.Namespace](m)
	enforced := maps.Clone(made)
	if enforced == nil {
		enforced = map[string]psa.Level{}
	}
	for _, ns := range namespaces {
		level, err := psa.ParseLevel(ns.Labels[psa.EnforceLevelLabel])
		if err != nil {
			t.Errorf("Namespace %s: label %s: %v", ns.Name, psa.EnforceLevelLabel, err)
		}
		enforced[ns.Name] = level
	}
	for _, o := range m.objects {
		meta := o.obj.(interface{ GetNamespace() string })
		switch o.obj.(type) {
		case *corev1.Namespace, *storagev1.CSIDriver, *storagev1.StorageClass, *snapv1.VolumeSnapshotClass,
			*snapshotMetadataService:
			if meta.GetNamespace() != "" {
				t.Errorf("%s: cluster-scoped object with a namespace", o)
			}
		default:
			if _, ok := enforced[meta.GetNamespace()]; !ok && !strings.HasPrefix(o.gvk.Kind, "Cluster") {
				t.Errorf("%s: namespace %q is not one the manifests create", o, meta.GetNamespace())
			}
		}
	}

	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	needed := map[string]psa.Level{}
	for _, w := range workloads(m) {
		need := leastLevel(eval, w)
		// The namespace is privileged for the node plugin; the
		// controller's pods ask for nothing of it unless told to share
		// the hosts' network (the chart's controller.hostNetwork).
		if strings.HasPrefix(w.name, "Deployment/") && !w.spec.HostNetwork && need != psa.LevelRestricted {
			t.Errorf("%s needs %q: the controller's pods must meet \"restricted\" (docs/security.md)", w.name, need)
		}
		if levelIndex(need) > levelIndex(needed[w.namespace]) { // -1 while unset
			needed[w.namespace] = need
		}
		if got, ok := enforced[w.namespace]; ok && levelIndex(need) > levelIndex(got) {
			res := policy.AggregateCheckResults(eval.EvaluatePod(psa.LevelVersion{Level: got, Version: psa.LatestVersion()}, &metav1.ObjectMeta{Labels: w.labels}, &w.spec))
			t.Errorf("%s: refused under %q in namespace %s: %s: %s", w.name, got, w.namespace, res.ForbiddenReason(), res.ForbiddenDetail())
		}
	}
	for ns, level := range enforced {
		need, ok := needed[ns]
		if !ok {
			need = psa.LevelRestricted
		}
		if levelIndex(level) > levelIndex(need) {
			t.Errorf("Namespace %s enforces %q, but its pods need only %q", ns, level, need)
		}
	}
}

// leastLevel is the least permissive level that admits w's pods.
func leastLevel(eval policy.Evaluator, w workload) psa.Level {
	for _, l := range levels {
		res := policy.AggregateCheckResults(eval.EvaluatePod(psa.LevelVersion{Level: l, Version: psa.LatestVersion()}, &metav1.ObjectMeta{Labels: w.labels}, &w.spec))
		if res.Allowed {
			return l
		}
	}
	return psa.LevelPrivileged
}

func levelIndex(l psa.Level) int {
	for i, x := range levels {
		if x == l {
			return i
		}
	}
	return -1
}
