package node

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// imageInfo is what the test reads of `rbd info --format json`.
type imageInfo struct {
	Features []string `json:"features"`
	Flags    []string `json:"flags"`
}

// rbdImage runs an rbd command on the volume's image as admin.
func (e *env) rbdImage(v *csi.Volume, args ...string) string {
	e.t.Helper()
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	full := append(append(append(args, "-p", e.c.Pool), e.c.NamespaceArgs()...), image)
	out, err := e.c.RBD(full...)
	harness.Must(e.t, err, "rbd %s", strings.Join(args, " "))
	return out
}

func (e *env) imageInfo(v *csi.Volume) imageInfo {
	e.t.Helper()
	var info imageInfo
	harness.Must(e.t, json.Unmarshal([]byte(e.rbdImage(v, "info", "--format", "json")), &info), "rbd info")
	return info
}

// A volume with the default features (exclusive-lock, object-map,
// fast-diff, deep-flatten) maps with the suite's mapper, takes writes,
// and leaves an object map that is valid and counts what was written: the
// map is kept by the kernel client (krbd), by librbd (nbd, fuse).
func TestDefaultFeaturesMapAndTrackWrites(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", singleWriter)
	v := e.createVolume("features", 256*mib, c)
	if got := e.imageInfo(v).Features; !containsAll(got, "layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten") {
		t.Fatalf("a new volume's features are %v, want the full default set", got)
	}
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, false)
	const written = 64 * mib
	want := writeRandom(t, filepath.Join(target, "data"), written)
	e.unpublish(v, target)
	e.unstage(v, staging)

	e.rbdImage(v, "object-map", "check")
	if info := e.imageInfo(v); len(info.Flags) != 0 {
		t.Fatalf("the image is flagged %v after a %s mapping wrote to it", info.Flags, mounter())
	}
	var du struct {
		Images []struct {
			Used int64 `json:"used_size"`
		} `json:"images"`
	}
	harness.Must(t, json.Unmarshal([]byte(e.rbdImage(v, "du", "--format", "json")), &du), "rbd du")
	if len(du.Images) != 1 || du.Images[0].Used < written {
		t.Fatalf("rbd du (from the object map) = %+v, want at least the %d bytes written", du, written)
	}

	// And the data is there on the next stage.
	e.stage(v, staging, c)
	e.publish(v, staging, target, c, true)
	if got := fileSum(t, filepath.Join(target, "data")); got != want {
		t.Fatalf("data read back differs after restaging")
	}
	e.unpublish(v, target)
}

// journaling is a feature librbd maps and the kernel client does not. With
// krbd the stage fails with FailedPrecondition naming the feature and the
// remedies, and leaves nothing mapped; with nbd and fuse it stages.
func TestJournalingByMapper(t *testing.T) {
	e := setup(t)
	c := blockCap(singleWriter)
	mapper := "nbd"
	if mounter() == "fuse" {
		mapper = "fuse"
	}
	// CreateVolume refuses journaling unless the StorageClass names a
	// mounter that maps it.
	v := e.createVolume("journal", 16*mib, c, "mounter", mapper, "imageFeatures", "layering,exclusive-lock,journaling")
	if got := e.imageInfo(v).Features; !slices.Contains(got, "journaling") {
		t.Fatalf("features %v lack journaling", got)
	}
	staging := e.path("staging")
	if mounter() != "krbd" {
		e.stage(v, staging, c)
		return
	}
	req := e.stageReq(v, staging, c)
	req.VolumeContext = clone(req.VolumeContext)
	req.VolumeContext["mounter"] = "krbd" // as a StorageClass edited after the volume was made
	_, err := e.nc.NodeStageVolume(ctx(t), req)
	expectCode(t, err, codes.FailedPrecondition, "staging a journaling image with krbd")
	for _, w := range []string{"journaling", "mounter nbd", "imageFeatures: layering"} {
		if err != nil && !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if m := mappings(e.dir); len(m) > 0 {
		t.Errorf("a refused stage left mappings: %v", m)
	}
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(list, w) {
			return false
		}
	}
	return true
}
