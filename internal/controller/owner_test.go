package controller_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// A volume's image names the PVC and PV it was made for, as the
// provisioner's --extra-create-metadata gives them, so `rbd image-meta
// list` tells an admin who owns it; a clone names its own, not its
// source's. Without those keys nothing is written.
func TestImageNamesItsOwner(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	create := func(name string, src *csi.VolumeContentSource, owner ...string) (string, error) {
		params := map[string]string{"clusterID": clusterID, "pool": poolName}
		if len(owner) == 3 {
			params["csi.storage.k8s.io/pvc/name"] = owner[0]
			params["csi.storage.k8s.io/pvc/namespace"] = owner[1]
			params["csi.storage.k8s.io/pv/name"] = owner[2]
		}
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
			Parameters: params, Secrets: secrets(), VolumeContentSource: src,
		})
		if err != nil {
			return "", err
		}
		t.Cleanup(func() { c.delete(t, resp.Volume.VolumeId) })
		return resp.Volume.VolumeId, nil
	}
	owner := func(id string) string {
		info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, id))
		must(t, err, "Stat")
		var kv []string
		for _, k := range []string{"rbdcsi.k8s.pvc.namespace", "rbdcsi.k8s.pvc.name", "rbdcsi.k8s.pv.name"} {
			if v, ok := info.Metadata[k]; ok {
				kv = append(kv, v)
			}
		}
		return strings.Join(kv, "/")
	}

	src, err := create("pvc-1", nil, "data", "shop", "pvc-1")
	must(t, err, "CreateVolume")
	if got := owner(src); got != "shop/data/pvc-1" {
		t.Errorf("new volume: owner %q, want shop/data/pvc-1", got)
	}
	clone, err := create("pvc-2", fromVolume(src), "copy", "shop", "pvc-2")
	must(t, err, "CreateVolume clone")
	if got := owner(clone); got != "shop/copy/pvc-2" {
		t.Errorf("clone: owner %q, want shop/copy/pvc-2", got)
	}
	bare, err := create("pvc-3", nil)
	must(t, err, "CreateVolume without owner")
	if got := owner(bare); got != "" {
		t.Errorf("no --extra-create-metadata: owner %q, want none", got)
	}
	_, err = create("pvc-4", nil, strings.Repeat("n", 254), "shop", "pvc-4")
	wantCode(t, err, codes.InvalidArgument, "a PVC name longer than Kubernetes allows")
}
