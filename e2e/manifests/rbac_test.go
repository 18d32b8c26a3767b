package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rule is one (API group, resource) with its verbs.
type rule struct {
	group, resource string
	verbs           []string
}

// sidecarRBAC is what a sidecar's own deploy/kubernetes/rbac*.yaml says it
// needs, at the tag the rules were copied from.
type sidecarRBAC struct {
	tag         string
	clusterRole string // the ClusterRole of controller.yaml's sidecar
	cluster     []rule // required, cluster-wide
	namespaced  []rule // required in the pod's namespace (leader election)
	optional    []rule // may be granted (commented out upstream, or for features not used here)
}

var (
	leases  = rule{"coordination.k8s.io", "leases", []string{"get", "watch", "list", "delete", "update", "create"}}
	events  = rule{"", "events", []string{"list", "watch", "create", "update", "patch"}}
	secrets = rule{"", "secrets", []string{"get", "list"}}
)

// documentedRBAC encodes the sidecars' documented rules. Bumping a sidecar
// tag in controller.yaml fails TestRBAC until these are re-read from the new
// release's rbac.yaml and the roles updated.
var documentedRBAC = map[string]sidecarRBAC{
	provisionerRepo: {
		clusterRole: "rbdcsi-external-provisioner",
		tag:         "v6.3.0",
		cluster: []rule{
			{"", "persistentvolumes", []string{"get", "list", "watch", "create", "patch", "delete"}},
			{"", "persistentvolumeclaims", []string{"get", "list", "watch", "update"}},
			{"storage.k8s.io", "storageclasses", []string{"get", "list", "watch"}},
			events,
			{"snapshot.storage.k8s.io", "volumesnapshots", []string{"get", "list", "watch", "update"}},
			{"snapshot.storage.k8s.io", "volumesnapshotcontents", []string{"get", "list"}},
			// Needed because the driver has PUBLISH_UNPUBLISH_VOLUME.
			{"storage.k8s.io", "volumeattachments", []string{"get", "list", "watch"}},
			// v6.3.0 watches nodes and CSINodes for a driver with
			// VOLUME_ACCESSIBILITY_CONSTRAINTS (cmd/csi-provisioner:
			// ctrl.SupportsTopology), which the controller advertises;
			// without them it provisions nothing.
			{"storage.k8s.io", "csinodes", []string{"get", "list", "watch"}},
			{"", "nodes", []string{"get", "list", "watch"}},
		},
		namespaced: []rule{leases},
		optional: []rule{
			secrets,
			// Not in v6.3.0's rbac.yaml, but a claim with a
			// VolumeAttributesClass makes the provisioner get it
			// (pkg/controller/controller.go, VolumeAttributesClasses().Get).
			{"storage.k8s.io", "volumeattributesclasses", []string{"get"}},
			{"storage.k8s.io", "csistoragecapacities", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{"", "pods", []string{"get"}},
			{"apps", "replicasets", []string{"get"}},
		},
	},
	attacherRepo: {
		clusterRole: "rbdcsi-external-attacher",
		tag:         "v4.13.0",
		cluster: []rule{
			{"", "persistentvolumes", []string{"get", "list", "watch", "patch"}},
			{"storage.k8s.io", "csinodes", []string{"get", "list", "watch"}},
			{"storage.k8s.io", "volumeattachments", []string{"get", "list", "watch", "patch"}},
			{"storage.k8s.io", "volumeattachments/status", []string{"patch"}},
		},
		namespaced: []rule{leases},
		optional:   []rule{secrets},
	},
	resizerRepo: {
		clusterRole: "rbdcsi-external-resizer",
		tag:         "v2.3.0",
		cluster: []rule{
			{"", "persistentvolumes", []string{"get", "list", "watch", "patch"}},
			{"", "persistentvolumeclaims", []string{"get", "list", "watch"}},
			{"", "persistentvolumeclaims/status", []string{"patch"}},
			events,
			{"storage.k8s.io", "volumeattributesclasses", []string{"get", "list", "watch"}},
		},
		namespaced: []rule{leases},
		optional: []rule{
			{"", "secrets", []string{"get", "list", "watch"}},
			// Documented, but v2.3.0 watches pods only with
			// --handle-volume-inuse-error=true (pkg/controller: NewResizeController);
			// controller.yaml sets it false.
			{"", "pods", []string{"get", "list", "watch"}},
		},
	},
	snapshotterRepo: {
		clusterRole: "rbdcsi-external-snapshotter",
		tag:         "v8.7.0",
		cluster: []rule{
			events,
			{"snapshot.storage.k8s.io", "volumesnapshotclasses", []string{"get", "list", "watch"}},
			{"snapshot.storage.k8s.io", "volumesnapshotcontents", []string{"get", "list", "watch", "update", "patch"}},
			{"snapshot.storage.k8s.io", "volumesnapshotcontents/status", []string{"update", "patch"}},
		},
		namespaced: []rule{leases},
		optional: []rule{
			secrets,
			{"groupsnapshot.storage.k8s.io", "volumegroupsnapshotclasses", []string{"get", "list", "watch"}},
			{"groupsnapshot.storage.k8s.io", "volumegroupsnapshotcontents", []string{"get", "list", "watch", "update", "patch"}},
			{"groupsnapshot.storage.k8s.io", "volumegroupsnapshotcontents/status", []string{"update", "patch"}},
		},
	},
	// Its own role upstream (deploy/snapshot-metadata-cluster-role.yaml)
	// also lets it write SnapshotMetadataService objects and get token and
	// access reviews, calls v1.1.0 never makes; and it lacks the
	// VolumeSnapshotClasses, which the sidecar gets and lists to find the
	// snapshotter Secret (pkg/internal/server/grpc/snapshotter_secret.go).
	snapshotMetadataRepo: {
		clusterRole: "rbdcsi-snapshot-metadata",
		tag:         "v1.1.0",
		cluster: []rule{
			{"cbt.storage.k8s.io", "snapshotmetadataservices", []string{"get", "list", "watch"}},
			{"authentication.k8s.io", "tokenreviews", []string{"create"}},
			{"authorization.k8s.io", "subjectaccessreviews", []string{"create"}},
			{"snapshot.storage.k8s.io", "volumesnapshots", []string{"get", "list"}},
			{"snapshot.storage.k8s.io", "volumesnapshotcontents", []string{"get", "list"}},
			{"snapshot.storage.k8s.io", "volumesnapshotclasses", []string{"get", "list"}},
		},
		optional: []rule{secrets},
	},
	// The csi-addons sidecar: its release ships no RBAC of its own; these
	// are the calls v0.13.0 makes, read from its source. It creates and
	// watches its pod's CSIAddonsNode (sidecar/internal/csiaddonsnode:
	// CreateOrUpdate, a Watch by name), gets its pod to find the object's
	// owner, and in a Deployment's pod that pod's ReplicaSet; gets the PV
	// a ReclaimSpace call names (internal/sidecar/service/reclaimspace.go);
	// checks each caller's token (TokenReview); and, where the plugin has
	// the controller service, elects a leader with a Lease. It gets the
	// Secret a NetworkFenceClass names (the fencing Ceph user) and a PV's
	// node-stage Secret, which the shipped classes do not name.
	csiAddonsRepo: {
		clusterRole: "rbdcsi-csi-addons",
		tag:         "v0.13.0",
		cluster: []rule{
			{"", "persistentvolumes", []string{"get"}},
			{"authentication.k8s.io", "tokenreviews", []string{"create"}},
		},
		namespaced: []rule{
			{"csiaddons.openshift.io", "csiaddonsnodes", []string{"get", "watch", "create", "update"}},
			{"", "pods", []string{"get"}},
		},
		optional: []rule{
			leases,
			{"apps", "replicasets", []string{"get"}},
			{"", "secrets", []string{"get"}},
		},
	},
	// node-driver-registrar and livenessprobe document that they need no
	// Kubernetes API access.
	registrarRepo: {},
	livenessRepo:  {},
}

// grant is one permission: verb on group/resource, cluster-wide
// (namespace "") or in one namespace.
type grant struct {
	namespace, group, resource, verb string
}

func (g grant) String() string {
	where := "cluster-wide"
	if g.namespace != "" {
		where = "in " + g.namespace
	}
	return fmt.Sprintf("%s %s (group %q) %s", g.verb, g.resource, g.group, where)
}

// grantsOf collects what the service account ns/sa may do, from the
// bindings and roles in the manifests. Wildcards and nonResourceURLs are
// reported as errors: this deployment never needs them. resourceNames only
// narrow a namespaced get of Secrets (TestSecretReaderNamesItsSecrets
// checks which); anywhere else they would hide a grant from this count.
func grantsOf(t *testing.T, m *manifests, ns, sa string) map[grant]bool {
	t.Helper()
	crs, _ := all[*rbacv1.ClusterRole](m)
	roles, _ := all[*rbacv1.Role](m)
	crbs, _ := all[*rbacv1.ClusterRoleBinding](m)
	rbs, _ := all[*rbacv1.RoleBinding](m)

	out := map[grant]bool{}
	add := func(scope string, rules []rbacv1.PolicyRule, what string) {
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s: rule %v uses nonResourceURLs", what, r)
			}
			if len(r.ResourceNames) > 0 && (scope == "" || !slices.Equal(r.Resources, []string{"secrets"}) || !slices.Equal(r.Verbs, []string{"get"})) {
				t.Errorf("%s: rule %v uses resourceNames other than for a namespaced get of secrets", what, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if g == "*" || res == "*" || v == "*" {
							t.Errorf("%s: wildcard in rule %v", what, r)
						}
						out[grant{scope, g, res, v}] = true
					}
				}
			}
		}
	}
	subject := func(subs []rbacv1.Subject) bool {
		for _, s := range subs {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ns {
				return true
			}
		}
		return false
	}
	clusterRole := func(name string) *rbacv1.ClusterRole {
		for _, cr := range crs {
			if cr.Name == name {
				return cr
			}
		}
		return nil
	}
	for _, b := range crbs {
		if !subject(b.Subjects) {
			continue
		}
		cr := clusterRole(b.RoleRef.Name)
		if b.RoleRef.Kind != "ClusterRole" || cr == nil {
			t.Errorf("ClusterRoleBinding %s: roleRef %s/%s is not in the manifests", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
			continue
		}
		add("", cr.Rules, "ClusterRole "+cr.Name)
	}
	for _, b := range rbs {
		if !subject(b.Subjects) {
			continue
		}
		switch b.RoleRef.Kind {
		case "ClusterRole":
			if cr := clusterRole(b.RoleRef.Name); cr != nil {
				add(b.Namespace, cr.Rules, "ClusterRole "+cr.Name)
				continue
			}
		case "Role":
			if r := findNamed(roles, b.Namespace, b.RoleRef.Name); r != nil {
				add(b.Namespace, r.Rules, "Role "+r.Name)
				continue
			}
		}
		t.Errorf("RoleBinding %s/%s: roleRef %s/%s is not in the manifests", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
	}
	return out
}

// TestRBAC: each pod's service account is granted every verb its sidecars
// document, and nothing they do not (least privilege). Secrets are
// readable only in the namespace, never cluster-wide; leases likewise.
func TestRBAC(t *testing.T) { eachInstall(t, checkRBAC) }

func checkRBAC(t *testing.T, m *manifests) {
	t.Helper()
	sas := map[string]bool{}
	for _, w := range workloads(m) {
		sa := w.spec.ServiceAccountName
		if sa == "" || sa == "default" {
			t.Errorf("%s: runs as the default service account", w.name)
			continue
		}
		if sas[sa] {
			t.Errorf("%s: shares service account %s with another workload", w.name, sa)
		}
		sas[sa] = true
		granted := grantsOf(t, m, w.namespace, sa)

		required := map[grant]bool{}
		allowed := map[grant]bool{}
		for _, c := range w.spec.Containers {
			repo, tag := imageRepo(c.Image)
			if repo == pluginRepo {
				continue // the plugin talks to Ceph only
			}
			doc, ok := documentedRBAC[repo]
			if !ok {
				t.Errorf("%s/%s: no documented RBAC for %s", w.name, c.Name, repo)
				continue
			}
			if doc.tag != "" && tag != doc.tag {
				t.Errorf("%s/%s: runs %s:%s but the documented rules in rbac_test.go are from %s: re-read its rbac.yaml and update both",
					w.name, c.Name, repo, tag, doc.tag)
			}
			for _, r := range doc.cluster {
				for _, v := range r.verbs {
					required[grant{"", r.group, r.resource, v}] = true
					allowed[grant{"", r.group, r.resource, v}] = true
				}
			}
			for _, r := range doc.namespaced {
				for _, v := range r.verbs {
					required[grant{w.namespace, r.group, r.resource, v}] = true
					allowed[grant{w.namespace, r.group, r.resource, v}] = true
				}
			}
			for _, r := range doc.optional {
				for _, v := range r.verbs {
					allowed[grant{w.namespace, r.group, r.resource, v}] = true
					if r.resource != "secrets" {
						allowed[grant{"", r.group, r.resource, v}] = true
					}
				}
			}
		}
		for g := range required {
			// A cluster-wide grant covers a namespaced need, but the
			// least-privilege check below refuses it for leases.
			if !granted[g] && !granted[grant{"", g.group, g.resource, g.verb}] {
				t.Errorf("%s (service account %s): not granted %s", w.name, sa, g)
			}
		}
		for g := range granted {
			if !allowed[g] {
				t.Errorf("%s (service account %s): granted %s, which none of its sidecars documents", w.name, sa, g)
			}
		}
		if len(required) == 0 {
			// No container needs the API: no token either.
			if len(granted) != 0 {
				t.Errorf("%s: its containers need no API access, yet it is granted %d permissions", w.name, len(granted))
			}
			if w.spec.AutomountServiceAccountToken == nil || *w.spec.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken should be false", w.name)
			}
		}
	}
	// Every binding's subjects are service accounts the manifests create.
	sasDefined, _ := all[*corev1.ServiceAccount](m)
	defined := map[string]bool{}
	for _, sa := range sasDefined {
		defined[sa.Namespace+"/"+sa.Name] = true
	}
	crbs, _ := all[*rbacv1.ClusterRoleBinding](m)
	rbs, _ := all[*rbacv1.RoleBinding](m)
	var subjects []rbacv1.Subject
	for _, b := range crbs {
		subjects = append(subjects, b.Subjects...)
	}
	for _, b := range rbs {
		subjects = append(subjects, b.Subjects...)
	}
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind || !defined[s.Namespace+"/"+s.Name] {
			t.Errorf("binding subject %s %s/%s is not a service account of the manifests", s.Kind, s.Namespace, s.Name)
		}
	}
	for sa := range sas {
		found := false
		for k := range defined {
			found = found || strings.HasSuffix(k, "/"+sa)
		}
		if !found {
			t.Errorf("service account %s is not in the manifests", sa)
		}
	}
}

// TestRBACPerSidecar: each sidecar that runs has a ClusterRole of its own
// that holds its documented cluster-wide rules and nothing else, so the
// roles stay readable and removable one sidecar at a time.
func TestRBACPerSidecar(t *testing.T) { eachInstall(t, checkRBACPerSidecar) }

func checkRBACPerSidecar(t *testing.T, m *manifests) {
	t.Helper()
	crs, _ := all[*rbacv1.ClusterRole](m)
	running := map[string]bool{}
	for _, w := range workloads(m) {
		for _, c := range w.spec.Containers {
			repo, _ := imageRepo(c.Image)
			running[repo] = true
		}
	}
	for repo, doc := range documentedRBAC {
		if doc.clusterRole == "" || !running[repo] {
			continue
		}
		var cr *rbacv1.ClusterRole
		for _, c := range crs {
			if c.Name == doc.clusterRole {
				cr = c
			}
		}
		if cr == nil {
			t.Errorf("%s: no ClusterRole %s", repo, doc.clusterRole)
			continue
		}
		has := ruleGrants(cr.Rules)
		allowed := map[grant]bool{}
		for _, r := range doc.cluster {
			for _, v := range r.verbs {
				g := grant{"", r.group, r.resource, v}
				allowed[g] = true
				if !has[g] {
					t.Errorf("ClusterRole %s lacks %s", cr.Name, g)
				}
			}
		}
		for _, r := range doc.optional {
			for _, v := range r.verbs {
				if r.resource != "secrets" {
					allowed[grant{"", r.group, r.resource, v}] = true
				}
			}
		}
		for g := range has {
			if !allowed[g] {
				t.Errorf("ClusterRole %s grants %s, which %s does not document", cr.Name, g, repo)
			}
		}
	}
}

// ruleGrants are the cluster-wide grants of a ClusterRole's rules.
func ruleGrants(rules []rbacv1.PolicyRule) map[grant]bool {
	out := map[grant]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[grant{"", g, res, v}] = true
				}
			}
		}
	}
	return out
}

// TestGrantsOfSeesEverything checks the RBAC walker on a tiny fixture, so
// a bug in it cannot make TestRBAC pass vacuously.
func TestGrantsOfSeesEverything(t *testing.T) {
	m := &manifests{objects: []object{
		{obj: &rbacv1.ClusterRole{ObjectMeta: objMeta("", "cr"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}}},
		{obj: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "crb"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "cr"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa", Namespace: "ns"}}}},
		{obj: &rbacv1.Role{ObjectMeta: objMeta("ns", "r"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}},
		{obj: &rbacv1.RoleBinding{ObjectMeta: objMeta("ns", "rb"), RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "r"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa", Namespace: "ns"}}}},
		{obj: &rbacv1.RoleBinding{ObjectMeta: objMeta("ns", "other"), RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "r"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "someone-else", Namespace: "ns"}}}},
	}}
	got := grantsOf(t, m, "ns", "sa")
	want := map[grant]bool{{"", "", "nodes", "get"}: true, {"ns", "", "secrets", "get"}: true}
	if len(got) != len(want) {
		t.Fatalf("grantsOf = %v, want %v", got, want)
	}
	for g := range want {
		if !got[g] {
			t.Errorf("grantsOf misses %s", g)
		}
	}
}

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

// TestResizerWatchesNoPods: the resizer's role grants no pods, which holds
// only while it runs with --handle-volume-inuse-error=false.
func TestResizerWatchesNoPods(t *testing.T) {
	for _, w := range workloads(installed(t)) {
		for _, c := range w.spec.Containers {
			if strings.HasPrefix(c.Image, resizerRepo+":") && mustFlags(t, c)["handle-volume-inuse-error"] != "false" {
				t.Errorf("%s/%s: needs --handle-volume-inuse-error=false (its role has no pods rule)", w.name, c.Name)
			}
		}
	}
}
