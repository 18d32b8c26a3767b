package controller_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// qosOf reads a volume's QoS limit keys from the fake cluster.
func (e *env) qosOf(t *testing.T, volumeID string) map[string]string {
	t.Helper()
	info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, volumeID))
	must(t, err, "Stat")
	out := map[string]string{}
	for k, v := range info.Metadata {
		if len(k) > 13 && k[:13] == "conf_rbd_qos_" {
			out[k] = v
		}
	}
	return out
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// QoS from a StorageClass and a VolumeAttributesClass at create (the
// latter wins), changed by ModifyVolume key by key, recomputed when the
// volume grows, and not inherited by a clone that sets none.
func TestQoSLifecycle(t *testing.T) {
	e := newEnv(t)
	c := e.start("", controller.Options{})
	create := func(name string, size int64, params, mutable map[string]string, src *csi.VolumeContentSource) (string, error) {
		p := map[string]string{"clusterID": clusterID, "pool": poolName}
		for k, v := range params {
			p[k] = v
		}
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: fsCaps(),
			Parameters: p, MutableParameters: mutable, Secrets: secrets(), VolumeContentSource: src,
		})
		if err != nil {
			return "", err
		}
		t.Cleanup(func() { c.delete(t, resp.Volume.VolumeId) })
		return resp.Volume.VolumeId, nil
	}
	modify := func(id string, mutable map[string]string) error {
		_, err := c.c.ControllerModifyVolume(ctx(t), &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: mutable, Secrets: secrets()})
		return err
	}
	expect := func(what, id string, want map[string]string) {
		t.Helper()
		if got := e.qosOf(t, id); !sameMap(got, want) {
			t.Errorf("%s: limits %v, want %v", what, got, want)
		}
	}

	id, err := create("qos", 8*mib,
		map[string]string{"maxIops": "100", "baseBps": "1048576", "bpsPerGiB": "1048576", "baseVolSizeBytes": "8388608"},
		map[string]string{"maxIops": "200"}, nil)
	must(t, err, "CreateVolume")
	expect("created", id, map[string]string{"conf_rbd_qos_iops_limit": "200", "conf_rbd_qos_bps_limit": "1048576"})

	must(t, modify(id, map[string]string{"maxReadIops": "50"}), "ModifyVolume")
	expect("a key added", id, map[string]string{"conf_rbd_qos_iops_limit": "200", "conf_rbd_qos_bps_limit": "1048576", "conf_rbd_qos_read_iops_limit": "50"})
	must(t, modify(id, map[string]string{"maxIops": "0"}), "ModifyVolume to no limit")
	expect("a limit lifted", id, map[string]string{"conf_rbd_qos_iops_limit": "0", "conf_rbd_qos_bps_limit": "1048576", "conf_rbd_qos_read_iops_limit": "50"})

	_, err = c.c.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 8*mib + 2<<30}, Secrets: secrets()})
	must(t, err, "ControllerExpandVolume")
	expect("grown by 2 GiB", id, map[string]string{"conf_rbd_qos_iops_limit": "0", "conf_rbd_qos_bps_limit": "3145728", "conf_rbd_qos_read_iops_limit": "50"})
	// A retried expand rewrites nothing that is current (it succeeds on a
	// full pool, where every write waits), and completes limits a crash
	// left stale after the resize.
	expand := func() error {
		_, err := c.c.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 8*mib + 2<<30}, Secrets: secrets()})
		return err
	}
	e.ceph.SetFull(poolName, true)
	must(t, expand(), "an expand retried on a full pool")
	e.ceph.SetFull(poolName, false)
	must(t, e.ceph.SetMetadata(ctx(t), e.pool, imageOf(t, id), map[string]string{"conf_rbd_qos_bps_limit": "1048576"}), "stale limit")
	must(t, expand(), "an expand retried after a crash before its QoS")
	expect("completed by the retry", id, map[string]string{"conf_rbd_qos_iops_limit": "0", "conf_rbd_qos_bps_limit": "3145728", "conf_rbd_qos_read_iops_limit": "50"})

	clone, err := create("qos-clone", 8*mib+2<<30, nil, nil, fromVolume(id))
	must(t, err, "CreateVolume clone")
	expect("a clone without QoS", clone, map[string]string{})
	own, err := create("qos-clone-own", 8*mib+2<<30, nil, map[string]string{"maxWriteBps": "7"}, fromVolume(id))
	must(t, err, "CreateVolume clone with QoS")
	expect("a clone with its own QoS", own, map[string]string{"conf_rbd_qos_write_bps_limit": "7"})

	// What a user may get wrong, and nothing changes.
	wantCode(t, modify(id, map[string]string{"pool": "other"}), codes.InvalidArgument, "a mutable parameter that is neither QoS nor sparsify")
	wantCode(t, modify(id, map[string]string{"maxIops": "-5"}), codes.InvalidArgument, "a negative limit")
	wantCode(t, modify(id, map[string]string{"readIopsPerGiB": "5"}), codes.InvalidArgument, "a per-GiB rate without its base")
	wantCode(t, modify(id, map[string]string{"maxBps": "10"}), codes.InvalidArgument, "a maximum below the base")
	expect("after refused changes", id, map[string]string{"conf_rbd_qos_iops_limit": "0", "conf_rbd_qos_bps_limit": "3145728", "conf_rbd_qos_read_iops_limit": "50"})
	wantCode(t, modify("v1:"+clusterID+":"+poolName+":csi-vol-00000000000000000000", map[string]string{"maxIops": "1"}), codes.NotFound, "a missing volume")
	_, err = create("qos-bad", 8*mib, map[string]string{"iopsPerGiB": "3"}, nil, nil)
	wantCode(t, err, codes.InvalidArgument, "a StorageClass per-GiB rate without its base")
	_, err = create("qos-bad2", 8*mib, nil, map[string]string{"mounter": "nbd"}, nil)
	wantCode(t, err, codes.InvalidArgument, "a mutable parameter that is not QoS at create")
}
