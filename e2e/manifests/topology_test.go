package manifests

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const topologyDir = "topology"

// TestTopologyComponent: deploy/topology lets the node plugin read Node
// objects and nothing else, binds that to the node's own account, hands a
// short-lived token to the plugin container alone, and passes a flag the
// plugin knows.
func TestTopologyComponent(t *testing.T) {
	dec := strictDecoder(newScheme(t))
	data, err := os.ReadFile(topologyDir + "/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for i, doc := range splitDocuments(data) {
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("rbac.yaml#%d: %v", i, err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			role = o
		case *rbacv1.ClusterRoleBinding:
			binding = o
		default:
			t.Errorf("rbac.yaml#%d: unexpected %T", i, obj)
		}
	}
	if role == nil || binding == nil {
		t.Fatal("rbac.yaml needs a ClusterRole and a ClusterRoleBinding")
	}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{""}) || !slices.Equal(role.Rules[0].Resources, []string{"nodes"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("ClusterRole %s may do more than get nodes: %+v", role.Name, role.Rules)
	}
	m := installed(t)
	dss, _ := all[*appsv1.DaemonSet](m)
	if len(dss) != 1 {
		t.Fatalf("want one DaemonSet installed by deploy/site, have %d", len(dss))
	}
	ds := dss[0]
	sa := ds.Spec.Template.Spec.ServiceAccountName
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
		binding.Subjects[0].Name != sa || binding.Subjects[0].Namespace != ds.Namespace {
		t.Errorf("ClusterRoleBinding %s does not bind %s to the node's account %s/%s: %+v", binding.Name, role.Name, ds.Namespace, sa, binding)
	}

	// The patch: strict into a DaemonSet, naming the shipped one.
	data, err = os.ReadFile(topologyDir + "/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var patch appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &patch); err != nil {
		t.Fatalf("node.yaml: %v", err)
	}
	if patch.Name != ds.Name || patch.Namespace != ds.Namespace {
		t.Errorf("node.yaml patches %s/%s, not the DaemonSet %s/%s", patch.Namespace, patch.Name, ds.Namespace, ds.Name)
	}
	spec := patch.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != ds.Spec.Template.Spec.Containers[0].Name || spec.AutomountServiceAccountToken != nil {
		t.Fatalf("node.yaml must mount the token into the plugin container alone, and leave automount alone: %+v", spec.Containers)
	}
	var tokenVolume *corev1.Volume
	for _, mnt := range spec.Containers[0].VolumeMounts {
		if mnt.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && mnt.ReadOnly {
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == mnt.Name {
					tokenVolume = &spec.Volumes[i]
				}
			}
		}
	}
	if tokenVolume == nil || tokenVolume.Projected == nil {
		t.Fatal("node.yaml mounts no projected token read-only where in-cluster clients read it")
	}
	for _, src := range tokenVolume.Projected.Sources {
		if tok := src.ServiceAccountToken; tok != nil && (tok.ExpirationSeconds == nil || *tok.ExpirationSeconds > 3607) {
			t.Error("the projected token must expire within about an hour")
		}
	}

	// The flag the kustomization adds is one the plugin has.
	data, err = os.ReadFile(topologyDir + "/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flags := loadPluginFlags(t)
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "value: --"); ok {
			name, _, _ := strings.Cut(v, "=")
			if _, known := flags[name]; !known {
				t.Errorf("kustomization.yaml adds --%s, which rbdplugin does not know", name)
			}
			found = found || name == "domain-labels"
		}
	}
	if !found {
		t.Error("kustomization.yaml does not add --domain-labels")
	}
}
