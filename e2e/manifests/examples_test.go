package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	groupsnapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// e2eExamples is the end-to-end test that applies every example on a real
// cluster; each example file must be one of its scenarios'.
const e2eExamples = "../e2e/k8s/examples_test.go"

func isBlockClaim(p *corev1.PersistentVolumeClaim) bool {
	return p.Spec.VolumeMode != nil && *p.Spec.VolumeMode == corev1.PersistentVolumeBlock
}

// exampleSet is what the examples refer to: what an install makes and
// what the example files bring themselves.
type exampleSet struct {
	classes   map[string]*storagev1.StorageClass
	snapshots map[string]*snapv1.VolumeSnapshot
	vacs      map[string]*storagev1.VolumeAttributesClass
	pvcs      map[string]*corev1.PersistentVolumeClaim
	pvs       map[string]*corev1.PersistentVolume
	settings  map[string]string
	// ceph: the Secrets with a Ceph key; keks: the KEK Secrets the
	// controller mounts; readable: the Secrets its sidecars may get (all
	// "namespace/name").
	ceph, keks, readable map[string]bool
}

// TestExamples: every example is whole with what an install makes (the
// StorageClasses, the VolumeSnapshotClass, the KEK Secret the controller
// mounts and its sidecars may get) and what the example files bring (their
// own classes, claims, PV): each claim names a class that exists, each
// reference (pod to claim, restore to snapshot, clone to source, claim to
// PV, group snapshot to claims) holds, the classes they bring are of the
// site's cluster, take the driver's parameters and name no Secret but an
// encrypted class's KEK Secret, and e2e/k8s's TestExamples applies every
// file.
func TestExamples(t *testing.T) {
	inst, ex := installed(t), loadAll(t).inDir(examplesDir)
	instClasses, _ := all[*storagev1.StorageClass](inst)
	exClasses, _ := all[*storagev1.StorageClass](ex)
	vscs, _ := all[*snapv1.VolumeSnapshotClass](inst)
	snaps, _ := all[*snapv1.VolumeSnapshot](ex)
	pvcs, _ := all[*corev1.PersistentVolumeClaim](ex)
	pvs, _ := all[*corev1.PersistentVolume](ex)
	vacs, _ := all[*storagev1.VolumeAttributesClass](ex)
	settingsData, err := os.ReadFile(filepath.Join(siteDir, "settings.env"))
	if err != nil {
		t.Fatal(err)
	}
	set := exampleSet{
		classes: byName(append(slices.Clone(instClasses), exClasses...)), snapshots: byName(snaps), vacs: byName(vacs),
		pvcs: byName(pvcs), pvs: byName(pvs), settings: readSettings(t, string(settingsData)),
		ceph: cephSecrets(t, inst), keks: kekMounts(t, inst),
		readable: secretsReadableBy(t, inst),
	}
	if len(set.classes) != len(instClasses)+len(exClasses) {
		t.Errorf("an example's StorageClass has the name of one an install makes")
	}

	for _, sc := range exClasses {
		checkExampleClass(t, set, sc)
	}
	for _, vac := range vacs {
		if vac.DriverName != driverName(t) {
			t.Errorf("VolumeAttributesClass %s: driverName %q", vac.Name, vac.DriverName)
		}
		for k := range vac.Parameters {
			if !slices.Contains(config.MutableParams(), k) {
				t.Errorf("VolumeAttributesClass %s: parameter %q is not one the driver takes", vac.Name, k)
			}
		}
	}
	for _, s := range snaps {
		// VolumeSnapshotClasses are cluster-scoped: no namespace.
		if s.Spec.VolumeSnapshotClassName == nil || findNamed(vscs, "", *s.Spec.VolumeSnapshotClassName) == nil {
			t.Errorf("VolumeSnapshot %s: class is not one an install makes", s.Name)
		}
		if src := s.Spec.Source.PersistentVolumeClaimName; src == nil || set.pvcs[*src] == nil {
			t.Errorf("VolumeSnapshot %s: source claim is not an example", s.Name)
		}
	}
	kinds := map[string]bool{}
	for _, p := range pvcs {
		for _, k := range checkExampleClaim(t, set, p) {
			kinds[k] = true
		}
	}
	for _, want := range []string{"restore", "clone", "block", "filesystem", "static", "encrypted", "qos", "topology"} {
		if !kinds[want] {
			t.Errorf("no example claim shows %s", want)
		}
	}
	checkExamplePods(t, ex, set)
	checkGroupSnapshots(t, ex, set)
	checkStaticVolumes(t, set)

	// The end-to-end test knows every file.
	e2e, err := os.ReadFile(e2eExamples)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range yamlFiles(t, examplesDir) {
		if !strings.Contains(string(e2e), `"`+filepath.Base(f)+`"`) {
			t.Errorf("%s: no scenario of %s applies it", f, e2eExamples)
		}
	}
	if _, err := os.Stat(filepath.Join(examplesDir, "expansion.md")); err != nil {
		t.Errorf("expansion walk-through: %v", err)
	}
}

// driverName is the installed CSIDriver's name.
func driverName(t *testing.T) string {
	t.Helper()
	return only[*storagev1.CSIDriver](t, installed(t), "CSIDriver").Name
}

// checkExampleClass: a class an example brings takes the driver's
// parameters, is of the site's cluster (as shipped in settings.env) and
// pool or places volumes by topology, and names no Secret
// (checkClassSecrets), but, when encrypted, the KEK Secret that the
// controller mounts for the rotation and its sidecars may get.
func checkExampleClass(t *testing.T, set exampleSet, sc *storagev1.StorageClass) {
	t.Helper()
	what := "example StorageClass " + sc.Name
	if sc.Provisioner != driverName(t) {
		t.Errorf("%s: provisioner %q", what, sc.Provisioner)
	}
	checkSidecarKeys(t, what, sc.Parameters)
	p, err := config.ParseParams(sc.Parameters)
	if err != nil {
		t.Errorf("%s: the driver refuses its parameters: %v", what, err)
		return
	}
	if p.ClusterID != set.settings["clusterID"] {
		t.Errorf("%s: clusterID %q, not the site's %q", what, p.ClusterID, set.settings["clusterID"])
	}
	if sc.Parameters[config.ParamTopologyConstrainedPools] == "" && p.Pool != set.settings["pool"] {
		t.Errorf("%s: pool %q, not the site's %q", what, p.Pool, set.settings["pool"])
	}
	kek := checkClassSecrets(t, what, sc.Parameters, set.ceph)
	if p.Encryption.Enabled && kek == "" {
		t.Errorf("%s: encrypted, but names no KEK Secret", what)
	}
	if kek != "" && (!set.keks[kek] || !set.readable[kek]) {
		t.Errorf("%s: KEK Secret %s: the controller mounts it for the rotation: %v, its sidecars may get it: %v; want both (the controller mounts %v)",
			what, kek, set.keks[kek], set.readable[kek], set.keks)
	}
}

// checkExampleClaim checks one claim's references and returns what it
// shows.
func checkExampleClaim(t *testing.T, set exampleSet, p *corev1.PersistentVolumeClaim) []string {
	t.Helper()
	var shows []string
	isBlock := isBlockClaim(p)
	if isBlock {
		shows = append(shows, "block")
	} else {
		shows = append(shows, "filesystem")
	}
	class := ""
	if p.Spec.StorageClassName != nil {
		class = *p.Spec.StorageClassName
	}
	if class == "" {
		pv := set.pvs[p.Spec.VolumeName]
		if pv == nil {
			t.Errorf("PVC %s: no class and no example PV (volumeName %q)", p.Name, p.Spec.VolumeName)
			return shows
		}
		return append(shows, "static")
	}
	sc := set.classes[class]
	if sc == nil {
		t.Errorf("PVC %s: StorageClass %q is neither one an install makes nor an example's", p.Name, class)
		return shows
	}
	if hasFs := sc.Parameters[config.ParamFsType] != ""; hasFs == isBlock {
		t.Errorf("PVC %s: volumeMode %s with StorageClass %s (fstype %q)", p.Name, fmtPtr(p.Spec.VolumeMode), sc.Name, sc.Parameters[config.ParamFsType])
	}
	if sc.Parameters[config.ParamEncrypted] == "true" {
		shows = append(shows, "encrypted")
	}
	if sc.Parameters[config.ParamTopologyConstrainedPools] != "" {
		shows = append(shows, "topology")
	}
	if v := p.Spec.VolumeAttributesClassName; v != nil {
		if set.vacs[*v] == nil {
			t.Errorf("PVC %s: VolumeAttributesClass %s is not an example's", p.Name, *v)
		}
		shows = append(shows, "qos")
	}
	if ds := p.Spec.DataSource; ds != nil {
		switch {
		case ds.Kind == "VolumeSnapshot" && ds.APIGroup != nil && *ds.APIGroup == snapv1.GroupName:
			shows = append(shows, "restore")
			if set.snapshots[ds.Name] == nil {
				t.Errorf("PVC %s: restores snapshot %s, which is not an example", p.Name, ds.Name)
			}
		case ds.Kind == "PersistentVolumeClaim" && (ds.APIGroup == nil || *ds.APIGroup == ""):
			shows = append(shows, "clone")
			src := set.pvcs[ds.Name]
			if src == nil {
				t.Errorf("PVC %s: clones %s, which is not an example", p.Name, ds.Name)
			} else if *src.Spec.StorageClassName != class {
				t.Errorf("PVC %s: a clone must use its source's StorageClass", p.Name)
			}
		default:
			t.Errorf("PVC %s: unexpected dataSource %v", p.Name, ds)
		}
	}
	return shows
}

// checkExamplePods: each pod's claims are examples, used as devices when
// Block and as mounts when Filesystem, and some pod uses a Block claim.
func checkExamplePods(t *testing.T, ex *manifests, set exampleSet) {
	t.Helper()
	pods, _ := all[*corev1.Pod](ex)
	var blockPod bool
	for _, pod := range pods {
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := set.pvcs[v.PersistentVolumeClaim.ClaimName]
			if claim == nil {
				t.Errorf("Pod %s: claim %s is not an example", pod.Name, v.PersistentVolumeClaim.ClaimName)
				continue
			}
			isBlock := isBlockClaim(claim)
			asDevice, asMount := false, false
			for _, c := range pod.Spec.Containers {
				for _, d := range c.VolumeDevices {
					asDevice = asDevice || d.Name == v.Name
				}
				for _, mnt := range c.VolumeMounts {
					asMount = asMount || mnt.Name == v.Name
				}
			}
			if isBlock != asDevice || isBlock == asMount {
				t.Errorf("Pod %s: claim %s (block=%v) must be used as volumeDevices for Block, volumeMounts for Filesystem", pod.Name, claim.Name, isBlock)
			}
			blockPod = blockPod || isBlock
		}
	}
	if !blockPod {
		t.Error("no example pod uses a Block claim through volumeDevices")
	}
}

// checkGroupSnapshots: a group snapshot's class is an example's, of this
// driver, naming no Secret (the controller snapshots as its own user), and
// its selector takes at least two example claims.
func checkGroupSnapshots(t *testing.T, ex *manifests, set exampleSet) {
	t.Helper()
	classes, _ := all[*groupsnapv1.VolumeGroupSnapshotClass](ex)
	groups, _ := all[*groupsnapv1.VolumeGroupSnapshot](ex)
	if len(groups) == 0 {
		t.Error("no example VolumeGroupSnapshot")
	}
	for _, c := range classes {
		if c.Driver != driverName(t) {
			t.Errorf("VolumeGroupSnapshotClass %s: driver %q", c.Name, c.Driver)
		}
		checkSidecarKeys(t, "VolumeGroupSnapshotClass "+c.Name, c.Parameters)
		checkNoSecrets(t, "VolumeGroupSnapshotClass "+c.Name, c.Parameters)
	}
	for _, g := range groups {
		if g.Spec.VolumeGroupSnapshotClassName == nil || findNamed(classes, "", *g.Spec.VolumeGroupSnapshotClassName) == nil {
			t.Errorf("VolumeGroupSnapshot %s: class is not an example's", g.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(g.Spec.Source.Selector)
		if err != nil || g.Spec.Source.Selector == nil {
			t.Errorf("VolumeGroupSnapshot %s: selector: %v", g.Name, err)
			continue
		}
		n := 0
		for _, p := range set.pvcs {
			if sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n < 2 {
			t.Errorf("VolumeGroupSnapshot %s: its selector takes %d example claims, want at least 2", g.Name, n)
		}
	}
}

// checkStaticVolumes: a static PV names this driver, an ID of the site's
// cluster and pool, the same cluster and pool in its attributes, and no
// Secret (the plugins use their own Ceph users); its claim asks for no
// more than it holds.
func checkStaticVolumes(t *testing.T, set exampleSet) {
	t.Helper()
	for _, pv := range set.pvs {
		what := "example PV " + pv.Name
		c := pv.Spec.CSI
		if c == nil || c.Driver != driverName(t) {
			t.Errorf("%s: not a CSI volume of this driver", what)
			continue
		}
		id, err := volid.DecodeVolume(c.VolumeHandle)
		if err != nil {
			t.Errorf("%s: volumeHandle %q: %v", what, c.VolumeHandle, err)
			continue
		}
		if id.ClusterID != set.settings["clusterID"] || id.Pool != set.settings["pool"] {
			t.Errorf("%s: volumeHandle %q is not in the site's %s/%s", what, c.VolumeHandle, set.settings["clusterID"], set.settings["pool"])
		}
		p, err := config.ParseVolumeContext(c.VolumeAttributes)
		if err != nil || !p.Static || p.ClusterID != id.ClusterID || p.Pool != id.Pool {
			t.Errorf("%s: volumeAttributes %v must say staticVolume \"true\" and the handle's cluster and pool (%v)", what, c.VolumeAttributes, err)
		}
		for name, ref := range map[string]*corev1.SecretReference{
			"controllerPublish": c.ControllerPublishSecretRef, "nodeStage": c.NodeStageSecretRef,
			"nodePublish": c.NodePublishSecretRef, "controllerExpand": c.ControllerExpandSecretRef,
			"nodeExpand": c.NodeExpandSecretRef,
		} {
			if ref != nil {
				t.Errorf("%s: %sSecretRef %s/%s; a PV names no Secret, the plugins reach Ceph as their own users", what, name, ref.Namespace, ref.Name)
			}
		}
		if pv.Spec.StorageClassName != "" || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
			t.Errorf("%s: want no class and reclaim policy Retain (the driver never deletes an image it did not make)", what)
		}
		for _, claim := range set.pvcs {
			if claim.Spec.VolumeName != pv.Name {
				continue
			}
			if claim.Spec.Resources.Requests.Storage().Cmp(pv.Spec.Capacity[corev1.ResourceStorage]) > 0 {
				t.Errorf("%s: claim %s asks for more than the PV holds", what, claim.Name)
			}
		}
	}
}
