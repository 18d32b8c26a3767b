package controller_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

func blockCaps(mode csi.VolumeCapability_AccessMode_Mode) []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}}
}

// features reads the image features of a volume from the fake cluster.
func (e *env) features(t *testing.T, volumeID string) string {
	t.Helper()
	info, err := e.ceph.Stat(ctx(t), e.pool, imageOf(t, volumeID))
	must(t, err, "Stat")
	return strings.Join(info.Features, ",")
}

// New images get the full feature set unless several nodes write them or
// the StorageClass names its own; restores and clones get the same rule.
func TestImageFeaturesByAccessMode(t *testing.T) {
	const full, lean = "deep-flatten,exclusive-lock,fast-diff,layering,object-map", "deep-flatten,layering"
	e := newEnv(t)
	c := e.start("", controller.Options{})
	create := func(name string, caps []*csi.VolumeCapability, src *csi.VolumeContentSource, extra ...string) (string, error) {
		params := map[string]string{"clusterID": clusterID, "pool": poolName}
		for i := 0; i+1 < len(extra); i += 2 {
			params[extra[i]] = extra[i+1]
		}
		resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: caps,
			Parameters: params, Secrets: secrets(), VolumeContentSource: src,
		})
		if err != nil {
			return "", err
		}
		return resp.Volume.VolumeId, nil
	}
	mustCreate := func(name string, caps []*csi.VolumeCapability, src *csi.VolumeContentSource, extra ...string) string {
		t.Helper()
		id, err := create(name, caps, src, extra...)
		must(t, err, "CreateVolume "+name)
		t.Cleanup(func() { c.delete(t, id) })
		return id
	}

	fs := mustCreate("fs", fsCaps(), nil)
	for _, c := range []struct {
		name, id, want string
	}{
		{"filesystem, one writer", fs, full},
		{"block, one node", mustCreate("rwo-block", blockCaps(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil), full},
		{"block, one writer and readers", mustCreate("mnsw-block", blockCaps(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER), nil), full},
		{"block, several writers", mustCreate("rwx-block", blockCaps(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), nil), lean},
		{"the StorageClass's", mustCreate("own", fsCaps(), nil, "imageFeatures", "layering,exclusive-lock"), "exclusive-lock,layering"},
		{"a clone", mustCreate("clone", fsCaps(), fromVolume(fs)), full},
		{"a clone several nodes write", mustCreate("rwx-clone", blockCaps(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), fromVolume(fs)), lean},
	} {
		if got := e.features(t, c.id); got != c.want {
			t.Errorf("%s: features %s, want %s", c.name, got, c.want)
		}
	}

	_, err := create("rwx-exclusive", blockCaps(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), nil, "mapOptions", "krbd:exclusive")
	wantCode(t, err, codes.InvalidArgument, "krbd:exclusive on a volume several nodes write")
	_, err = create("krbd-journal", fsCaps(), nil, "mounter", "krbd", "imageFeatures", "layering,exclusive-lock,journaling")
	wantCode(t, err, codes.InvalidArgument, "journaling for krbd")
	nbd := mustCreate("nbd-journal", fsCaps(), nil, "mounter", "nbd", "imageFeatures", "layering,exclusive-lock,journaling")
	if got := e.features(t, nbd); got != "exclusive-lock,journaling,layering" {
		t.Errorf("journaling for nbd: features %s", got)
	}
}
