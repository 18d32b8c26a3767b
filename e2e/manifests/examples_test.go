package manifests

import (
	"os"
	"path/filepath"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

func isBlockClaim(p *corev1.PersistentVolumeClaim) bool {
	return p.Spec.VolumeMode != nil && *p.Spec.VolumeMode == corev1.PersistentVolumeBlock
}

// TestExamples: the examples use the StorageClasses and the
// VolumeSnapshotClass of deploy/kubernetes, and refer to each other
// consistently (pods to their claims, restore to the snapshot, clone to
// its source, block pods to Block claims).
func TestExamples(t *testing.T) {
	loaded := loadAll(t)
	base, ex := loaded.inDir(kubernetesDir), loaded.inDir(examplesDir)
	scs, _ := all[*storagev1.StorageClass](base)
	vscs, _ := all[*snapv1.VolumeSnapshotClass](base)
	pvcs, _ := all[*corev1.PersistentVolumeClaim](ex)
	snaps, _ := all[*snapv1.VolumeSnapshot](ex)
	pods, _ := all[*corev1.Pod](ex)
	scByName, pvcByName, snapByName := byName(scs), byName(pvcs), byName(snaps)

	for _, s := range snaps {
		// VolumeSnapshotClasses are cluster-scoped: no namespace.
		if s.Spec.VolumeSnapshotClassName == nil || findNamed(vscs, "", *s.Spec.VolumeSnapshotClassName) == nil {
			t.Errorf("VolumeSnapshot %s: class is not one of deploy/kubernetes", s.Name)
		}
		if src := s.Spec.Source.PersistentVolumeClaimName; src == nil || pvcByName[*src] == nil {
			t.Errorf("VolumeSnapshot %s: source claim is not an example", s.Name)
		}
	}

	var restore, clone, block, fs bool
	for _, p := range pvcs {
		if p.Spec.StorageClassName == nil || scByName[*p.Spec.StorageClassName] == nil {
			t.Errorf("PVC %s: storageClassName is not one of deploy/kubernetes", p.Name)
			continue
		}
		sc := scByName[*p.Spec.StorageClassName]
		isBlock := isBlockClaim(p)
		if hasFs := sc.Parameters[config.ParamFsType] != ""; hasFs == isBlock {
			t.Errorf("PVC %s: volumeMode %s with StorageClass %s (fstype %q)", p.Name, fmtPtr(p.Spec.VolumeMode), sc.Name, sc.Parameters[config.ParamFsType])
		}
		block = block || isBlock
		fs = fs || !isBlock
		if ds := p.Spec.DataSource; ds != nil {
			switch {
			case ds.Kind == "VolumeSnapshot" && ds.APIGroup != nil && *ds.APIGroup == snapv1.GroupName:
				restore = true
				if snapByName[ds.Name] == nil {
					t.Errorf("PVC %s: restores snapshot %s, which is not an example", p.Name, ds.Name)
				}
			case ds.Kind == "PersistentVolumeClaim" && (ds.APIGroup == nil || *ds.APIGroup == ""):
				clone = true
				src := pvcByName[ds.Name]
				if src == nil {
					t.Errorf("PVC %s: clones %s, which is not an example", p.Name, ds.Name)
				} else if *src.Spec.StorageClassName != *p.Spec.StorageClassName {
					t.Errorf("PVC %s: a clone must use its source's StorageClass", p.Name)
				}
			default:
				t.Errorf("PVC %s: unexpected dataSource %v", p.Name, ds)
			}
		}
	}
	if !restore || !clone || !block || !fs {
		t.Errorf("examples need a restore (%v), a clone (%v), a Block (%v) and a Filesystem (%v) claim", restore, clone, block, fs)
	}

	var blockPod bool
	for _, pod := range pods {
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := pvcByName[v.PersistentVolumeClaim.ClaimName]
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
	if _, err := os.Stat(filepath.Join(examplesDir, "expansion.md")); err != nil {
		t.Errorf("expansion walk-through: %v", err)
	}
}
