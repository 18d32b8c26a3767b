package manifests

import (
	"path"
	"slices"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// TestOneDriverName: the CSIDriver, the StorageClasses, the
// VolumeSnapshotClass, every plugin container's --drivername, the kubelet
// plugin directory and the binary's default all name the same driver.
func TestOneDriverName(t *testing.T) {
	m := installed(t)
	name := only[*storagev1.CSIDriver](t, m, "CSIDriver").Name

	if def := loadPluginFlags(t)["drivername"]; def != name {
		t.Errorf("rbdplugin --drivername defaults to %q, the CSIDriver is %q", def, name)
	}
	scs, _ := all[*storagev1.StorageClass](m)
	for _, sc := range scs {
		if sc.Provisioner != name {
			t.Errorf("StorageClass %s: provisioner %q, want %q", sc.Name, sc.Provisioner, name)
		}
	}
	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, vsc := range vscs {
		if vsc.Driver != name {
			t.Errorf("VolumeSnapshotClass %s: driver %q, want %q", vsc.Name, vsc.Driver, name)
		}
	}
	if len(scs) == 0 || len(vscs) == 0 {
		t.Errorf("want StorageClasses and a VolumeSnapshotClass, got %d and %d", len(scs), len(vscs))
	}
	for _, w := range workloads(m) {
		for _, c := range containers(w.spec, pluginRepo) {
			if got, ok := mustFlags(t, c)["drivername"]; ok && got != name {
				t.Errorf("%s/%s: --drivername=%s, want %s", w.name, c.Name, got, name)
			}
		}
		// The node plugin's socket directory is named after the driver.
		for _, v := range w.spec.Volumes {
			if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, kubeletPluginsDir+"/") &&
				path.Dir(path.Clean(v.HostPath.Path)) == kubeletPluginsDir && path.Base(v.HostPath.Path) != name {
				t.Errorf("%s: volume %s: hostPath %s is not %s/%s", w.name, v.Name, v.HostPath.Path, kubeletPluginsDir, name)
			}
		}
	}
}

// TestCSIDriverSpec pins the CSIDriver fields the driver relies on.
func TestCSIDriverSpec(t *testing.T) {
	drivers, _ := all[*storagev1.CSIDriver](installed(t))
	for _, d := range drivers {
		s := d.Spec
		if s.AttachRequired == nil || !*s.AttachRequired {
			t.Errorf("CSIDriver %s: attachRequired must be true (ControllerPublish records attachments)", d.Name)
		}
		if s.PodInfoOnMount == nil || !*s.PodInfoOnMount {
			t.Errorf("CSIDriver %s: podInfoOnMount must be true (krbd QoS needs the pod's UID)", d.Name)
		}
		if s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
			t.Errorf("CSIDriver %s: fsGroupPolicy must be File", d.Name)
		}
		if s.RequiresRepublish == nil || !*s.RequiresRepublish {
			t.Errorf("CSIDriver %s: requiresRepublish must be true (the republish re-attaches nbd volumes whose daemon died)", d.Name)
		}
		if !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
			t.Errorf("CSIDriver %s: volumeLifecycleModes = %v, want [Persistent]", d.Name, s.VolumeLifecycleModes)
		}
	}
}
