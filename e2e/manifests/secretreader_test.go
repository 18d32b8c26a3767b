package manifests

import (
	"slices"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// sidecarSecretOps are the operations whose secrets the controller's
// sidecars fetch from the API. The node-stage secret is kubelet's to
// fetch, with its own rights.
var sidecarSecretOps = []string{"provisioner", "controller-publish", "controller-expand", "controller-modify", "snapshotter", "group-snapshotter"}

// TestSecretReaderNamesItsSecrets: the controller may get exactly the KEK
// Secrets: the ones the classes name for its sidecars and the one it
// mounts for the KEK rotation (kekMounts), by name; never a Secret with a
// Ceph key, nor any other Secret of their namespace.
func TestSecretReaderNamesItsSecrets(t *testing.T) { eachInstall(t, checkSecretReader) }

func checkSecretReader(t *testing.T, m *manifests) {
	t.Helper()
	ctrl := only[*appsv1.Deployment](t, m, "Deployment")
	sa, ns := ctrl.Spec.Template.Spec.ServiceAccountName, ctrl.Namespace

	want := kekMounts(t, m) // "namespace/name"
	refer := func(what string, params map[string]string) {
		named := classSecrets(t, what, params)
		for _, op := range sidecarSecretOps {
			if s, ok := named[op]; ok {
				want[s] = true
			}
		}
	}
	scs, _ := all[*storagev1.StorageClass](m)
	for _, sc := range scs {
		refer("StorageClass "+sc.Name, sc.Parameters)
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, vsc := range vscs {
		refer("VolumeSnapshotClass "+vsc.Name, vsc.Parameters)
	}

	// The csi-addons sidecar gets the Secrets of the fencing Ceph user that
	// a NetworkFenceClass names (docs/csi-addons.md), since the csi-addons
	// controller passes a NetworkFence call the class's Secret and the
	// controller's own user may not lift a fence, and of the user a
	// VolumeReplicationClass names (docs/disaster-recovery.md), since the
	// sidecar v0.13.0 reads a Secret for every replication call: the only
	// Ceph keys a sidecar reads. They are the admin's, never rendered,
	// never a plugin's.
	fence := map[string]bool{}
	if len(containers(ctrl.Spec.Template.Spec, csiAddonsRepo)) > 0 {
		for _, s := range []string{"rbdcsi-fence", "rbdcsi-replication"} {
			fence[ns+"/"+s] = true
			want[ns+"/"+s] = true
		}
	}

	ceph := cephSecrets(t, m)
	got := secretsReadableBy(t, m)
	for s := range want {
		if !got[s] {
			t.Errorf("service account %s/%s cannot get Secret %s, a KEK Secret the controller mounts or a class names for its sidecars", ns, sa, s)
		}
	}
	for s := range got {
		if ceph[s] && !fence[s] {
			t.Errorf("service account %s/%s can get Secret %s, which holds a Ceph key: the plugins mount their own, the sidecars need none", ns, sa, s)
		} else if !want[s] {
			t.Errorf("service account %s/%s can get Secret %s, which is no KEK Secret the controller mounts or a class names", ns, sa, s)
		}
	}
}

// secretsReadableBy returns the Secrets ("namespace/name") that the
// controller's service account may get (secretsReadable).
func secretsReadableBy(t *testing.T, m *manifests) map[string]bool {
	t.Helper()
	ctrl := only[*appsv1.Deployment](t, m, "Deployment")
	return secretsReadable(t, m, ctrl.Namespace, ctrl.Spec.Template.Spec.ServiceAccountName)
}

// secretsReadable returns the Secrets ("namespace/name") that the service
// account may get through Roles; a rule without resourceNames fails t,
// since it would open every Secret of its namespace.
func secretsReadable(t *testing.T, m *manifests, ns, sa string) map[string]bool {
	t.Helper()
	roles, _ := all[*rbacv1.Role](m)
	rbs, _ := all[*rbacv1.RoleBinding](m)
	out := map[string]bool{}
	for _, b := range rbs {
		if b.RoleRef.Kind != "Role" || !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ns
		}) {
			continue
		}
		r := findNamed(roles, b.Namespace, b.RoleRef.Name)
		if r == nil {
			continue
		}
		for _, rule := range r.Rules {
			if !slices.Contains(rule.APIGroups, "") || !slices.Contains(rule.Resources, "secrets") || !slices.Contains(rule.Verbs, "get") {
				continue
			}
			if len(rule.ResourceNames) == 0 {
				t.Errorf("Role %s/%s: gets every Secret of its namespace; list the ones the classes name in resourceNames", r.Namespace, r.Name)
			}
			for _, name := range rule.ResourceNames {
				out[r.Namespace+"/"+name] = true
			}
		}
	}
	return out
}
