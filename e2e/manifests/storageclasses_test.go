package manifests

import (
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
)

// sidecarParams are the StorageClass / VolumeSnapshotClass keys under
// csi.storage.k8s.io/ that the sidecars consume; any other key with that
// prefix is a typo the driver would silently ignore.
var sidecarParams = map[string]bool{
	"csi.storage.k8s.io/fstype": true,
}

func init() {
	for _, op := range secretOps {
		sidecarParams["csi.storage.k8s.io/"+op+"-secret-name"] = true
		sidecarParams["csi.storage.k8s.io/"+op+"-secret-namespace"] = true
	}
}

// checkSidecarKeys reports the reserved-prefix keys of params that no
// sidecar consumes.
func checkSidecarKeys(t *testing.T, what string, params map[string]string) {
	t.Helper()
	for k := range params {
		if strings.HasPrefix(k, config.ReservedPrefix) && !sidecarParams[k] {
			t.Errorf("%s: parameter %s is no sidecar's", what, k)
		}
	}
}

// TestStorageClasses: parameters are ones the driver accepts (its own
// ParseParams), no class names a Secret (checkClassSecrets: the plugins
// use their own Ceph users; an encrypted class names only its KEK Secret),
// expansion is allowed, and there is one class each for ext4, xfs and raw
// block.
func TestStorageClasses(t *testing.T) {
	m := installed(t)
	scs, _ := all[*storagev1.StorageClass](m)
	ceph := cephSecrets(t, m)
	cms, _ := all[*corev1.ConfigMap](m)
	clusters := map[string]bool{}
	for _, cm := range cms {
		if data, ok := cm.Data["cluster-config.json"]; ok {
			list, err := cluster.ParseMap([]byte(data))
			if err != nil {
				t.Fatalf("ConfigMap %s: %v", cm.Name, err)
			}
			for _, c := range list {
				clusters[c.ClusterID] = true
			}
		}
	}
	fsTypes := map[string]bool{}
	for _, sc := range scs {
		checkSidecarKeys(t, "StorageClass "+sc.Name, sc.Parameters)
		p, err := config.ParseParams(sc.Parameters)
		if err != nil {
			t.Errorf("StorageClass %s: the driver refuses its parameters: %v", sc.Name, err)
			continue
		}
		if !clusters[p.ClusterID] {
			t.Errorf("StorageClass %s: clusterID %s is not in the cluster map", sc.Name, p.ClusterID)
		}
		if p.FsType == "" {
			fsTypes["block"] = true
		} else {
			fsTypes[p.FsType] = true
		}
		if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
			t.Errorf("StorageClass %s: allowVolumeExpansion must be true", sc.Name)
		}
		checkClassSecrets(t, "StorageClass "+sc.Name, sc.Parameters, ceph)
	}
	for _, want := range []string{"ext4", "xfs", "block"} {
		if !fsTypes[want] {
			t.Errorf("no StorageClass for %s", want)
		}
	}

	vscs, _ := all[*snapv1.VolumeSnapshotClass](m)
	for _, vsc := range vscs {
		checkSidecarKeys(t, "VolumeSnapshotClass "+vsc.Name, vsc.Parameters)
		checkNoSecrets(t, "VolumeSnapshotClass "+vsc.Name, vsc.Parameters)
	}
}
