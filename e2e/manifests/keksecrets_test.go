package manifests

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	groupsnapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// The plugins reach Ceph as their own users, from the Secrets they mount
// (--controller-secret-dir, --node-secret-dir): no class names a Secret
// with a Ceph key. An encrypted class names its KEK Secret, a Secret of
// its own, for CreateVolume (provisioner) and NodeStageVolume (node-stage)
// only; the controller mounts the KEK Secret, optional, for the KEK
// rotation (--kms-secret-dir).

// secretOps are the operations a class's csi.storage.k8s.io/<op>-secret-name
// and -namespace parameters name a Secret for.
var secretOps = []string{"provisioner", "controller-publish", "node-stage", "node-publish",
	"controller-expand", "node-expand", "controller-modify", "snapshotter", "group-snapshotter"}

// kekSecretOps are the only operations an encrypted class names its KEK
// Secret for: CreateVolume wraps the data key, NodeStageVolume unwraps it.
var kekSecretOps = []string{"provisioner", "node-stage"}

// kekSecretDir is where the shipped controller mounts the KEK Secret.
const kekSecretDir = "/etc/rbdcsi/kms-secret"

// classSecrets returns the Secrets ("namespace/name") params names, by
// operation; a name without its namespace, or the reverse, fails t.
func classSecrets(t *testing.T, what string, params map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, op := range secretOps {
		name := params["csi.storage.k8s.io/"+op+"-secret-name"]
		ns := params["csi.storage.k8s.io/"+op+"-secret-namespace"]
		switch {
		case name == "" && ns == "":
		case name == "" || ns == "":
			t.Errorf("%s: the %s secret has a name %q and a namespace %q: both or neither", what, op, name, ns)
		default:
			out[op] = ns + "/" + name
		}
	}
	return out
}

// cephSecrets are the Secrets ("namespace/name") that hold a Ceph key: the
// ones among m's objects with a userKey, and the ones the plugins mount as
// their own users (which a chart may leave to the user to make).
func cephSecrets(t *testing.T, m *manifests) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	secrets, _ := all[*corev1.Secret](m)
	for _, s := range secrets {
		if secretData(s)["userKey"] != "" {
			out[s.Namespace+"/"+s.Name] = true
		}
	}
	for _, w := range workloads(m) {
		plugin := pluginContainer(t, w.spec)
		args := mustFlags(t, plugin)
		for _, flag := range []string{"controller-secret-dir", "node-secret-dir"} {
			dir, ok := args[flag]
			if !ok {
				continue
			}
			if v, _, _, err := resolve(w.spec, plugin, dir); err == nil && v.Secret != nil {
				out[w.namespace+"/"+v.Secret.SecretName] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no Secret with a Ceph key: neither rendered nor mounted by a plugin")
	}
	return out
}

// checkClassSecrets: a class that is not encrypted names no Secret at all
// (the plugins use their own Ceph users); an encrypted one names exactly
// one Secret, as its provisioner and node-stage secret and for nothing
// else, which is no Ceph user's. It returns that KEK Secret, "" for none.
func checkClassSecrets(t *testing.T, what string, params map[string]string, ceph map[string]bool) string {
	t.Helper()
	named := classSecrets(t, what, params)
	// The driver's own reading of the class (a class it refuses fails the
	// callers' checks of its parameters).
	p, err := config.ParseParams(params)
	if err != nil || !p.Encryption.Enabled {
		if len(named) > 0 {
			t.Errorf("%s: names Secrets %v; a class that is not encrypted names none (the plugins reach Ceph as their own users)", what, named)
		}
		return ""
	}
	ops := slices.Sorted(maps.Keys(named))
	if want := slices.Sorted(slices.Values(kekSecretOps)); !slices.Equal(ops, want) {
		t.Errorf("%s: an encrypted class names its KEK Secret for %v, and for nothing else; it names Secrets for %v", what, want, ops)
	}
	kek := named["provisioner"]
	for op, s := range named {
		if s != kek {
			t.Errorf("%s: the %s secret %s is not the provisioner's %s: one KEK Secret wraps and unwraps", what, op, s, kek)
		}
	}
	for _, s := range named {
		if ceph[s] {
			t.Errorf("%s: names Secret %s, which holds a Ceph key: KEKs live in a Secret of their own (the driver refuses one with both)", what, s)
		}
	}
	return kek
}

// checkNoSecrets: a snapshot class names no Secret: the controller
// snapshots as its own Ceph user.
func checkNoSecrets(t *testing.T, what string, params map[string]string) {
	t.Helper()
	if named := classSecrets(t, what, params); len(named) > 0 {
		t.Errorf("%s: names Secrets %v; the controller snapshots as its own Ceph user", what, named)
	}
}

// checkClassesSecrets holds every class of m to checkClassSecrets and
// checkNoSecrets, and returns the KEK Secrets the StorageClasses name.
func checkClassesSecrets(t *testing.T, m *manifests) map[string]bool {
	t.Helper()
	ceph := cephSecrets(t, m)
	keks := map[string]bool{}
	scs, _ := all[*storagev1.StorageClass](m)
	for _, sc := range scs {
		if kek := checkClassSecrets(t, "StorageClass "+sc.Name, sc.Parameters, ceph); kek != "" {
			keks[kek] = true
		}
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, c := range vscs {
		checkNoSecrets(t, "VolumeSnapshotClass "+c.Name, c.Parameters)
	}
	vgscs, _ := all[*groupsnapv1.VolumeGroupSnapshotClass](m)
	for _, c := range vgscs {
		checkNoSecrets(t, "VolumeGroupSnapshotClass "+c.Name, c.Parameters)
	}
	return keks
}

// kekMounts checks the controller's --kms-secret-dir: the mount point of a
// Secret volume (or a projected volume of Secrets, for several tenants),
// read-only, each Secret optional (without it the controller starts and
// rotates nothing), readable through fsGroup only (defaultMode 0440), and
// none a Ceph user's. It returns those Secrets ("namespace/name").
func kekMounts(t *testing.T, m *manifests) map[string]bool {
	t.Helper()
	ceph := cephSecrets(t, m)
	out := map[string]bool{}
	controllers := 0
	for _, w := range workloads(m) {
		plugin := pluginContainer(t, w.spec)
		args := mustFlags(t, plugin)
		if args["mode"] != "controller" {
			if dir, ok := args["kms-secret-dir"]; ok {
				t.Errorf("%s: --kms-secret-dir=%s outside the controller (only its KEK rotation reads it)", w.name, dir)
			}
			continue
		}
		controllers++
		dir, ok := args["kms-secret-dir"]
		if !ok {
			t.Errorf("%s: no --kms-secret-dir: the KEK rotation has no keys", w.name)
			continue
		}
		v, mnt, rel, err := resolve(w.spec, plugin, dir)
		if err != nil {
			t.Errorf("%s: --kms-secret-dir=%s: %v", w.name, dir, err)
			continue
		}
		if rel != "" || mnt.SubPath != "" || !mnt.ReadOnly {
			t.Errorf("%s: --kms-secret-dir=%s must be the read-only mount point of volume %s (path inside it %q, subPath %q, readOnly %v)",
				w.name, dir, v.Name, rel, mnt.SubPath, mnt.ReadOnly)
		}
		var names []string
		switch {
		case v.Secret != nil:
			s := v.Secret
			if s.Optional == nil || !*s.Optional {
				t.Errorf("%s: KEK Secret %s is not optional: the controller would not start before it exists", w.name, s.SecretName)
			}
			if s.DefaultMode == nil || *s.DefaultMode != 0o440 {
				t.Errorf("%s: KEK Secret %s: defaultMode %s, want 0440", w.name, s.SecretName, octal(s.DefaultMode))
			}
			names = append(names, s.SecretName)
		case v.Projected != nil:
			if v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o440 {
				t.Errorf("%s: KEK volume %s: defaultMode %s, want 0440", w.name, v.Name, octal(v.Projected.DefaultMode))
			}
			for _, src := range v.Projected.Sources {
				if src.Secret == nil {
					t.Errorf("%s: KEK volume %s projects something other than Secrets", w.name, v.Name)
					continue
				}
				if src.Secret.Optional == nil || !*src.Secret.Optional {
					t.Errorf("%s: KEK Secret %s is not optional", w.name, src.Secret.Name)
				}
				names = append(names, src.Secret.Name)
			}
		default:
			t.Errorf("%s: --kms-secret-dir=%s is volume %s, not Secrets", w.name, dir, v.Name)
		}
		for _, n := range names {
			s := w.namespace + "/" + n
			if ceph[s] {
				t.Errorf("%s: --kms-secret-dir is Secret %s, which holds a Ceph key", w.name, s)
			}
			out[s] = true
		}
	}
	if controllers == 0 {
		t.Fatal("no controller workload")
	}
	if len(out) == 0 {
		t.Error("the controller mounts no KEK Secret")
	}
	return out
}

func octal(mode *int32) string {
	if mode == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *mode)
}

// TestNoCephSecretInClasses: no class an install makes names a Secret
// (none is encrypted); the examples' classes, claims' PVs and group
// snapshot classes are held to the same rule in TestExamples.
func TestNoCephSecretInClasses(t *testing.T) {
	eachInstall(t, func(t *testing.T, m *manifests) {
		scs, _ := all[*storagev1.StorageClass](m)
		vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
		if len(scs) == 0 || len(vscs) == 0 {
			t.Fatalf("%d StorageClasses and %d VolumeSnapshotClasses, want some of each", len(scs), len(vscs))
		}
		for _, sc := range scs {
			var named []string
			for k := range sc.Parameters {
				if strings.HasPrefix(k, "csi.storage.k8s.io/") && strings.Contains(k, "-secret-") {
					named = append(named, k)
				}
			}
			if len(named) > 0 {
				slices.Sort(named)
				t.Errorf("StorageClass %s: parameters %q: the shipped classes name no Secret", sc.Name, named)
			}
		}
		if keks := checkClassesSecrets(t, m); len(keks) > 0 {
			t.Errorf("shipped classes name KEK Secrets %v; none is encrypted", keks)
		}
	})
}

// TestControllerMountsKEKSecret: the controller mounts the KEK Secret
// rbdcsi-keks, optional, at --kms-secret-dir, for the KEK rotation.
func TestControllerMountsKEKSecret(t *testing.T) {
	eachInstall(t, func(t *testing.T, m *manifests) {
		got := kekMounts(t, m)
		if want := map[string]bool{"rbdcsi/rbdcsi-keks": true}; !maps.Equal(got, want) {
			t.Errorf("the controller mounts KEK Secrets %v at --kms-secret-dir, want %v", got, want)
		}
		if args := mustFlags(t, controllerPlugin(t, m)); args["kms-secret-dir"] != kekSecretDir {
			t.Errorf("--kms-secret-dir=%s, want %s", args["kms-secret-dir"], kekSecretDir)
		}
	})
}
