package addons

import (
	"crypto/rand"
	"encoding/json"
	"testing"

	librbd "github.com/ceph/go-ceph/rbd"
	"github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// writeAt writes data into the image as admin, through librbd.
func writeAt(t *testing.T, c harness.Cluster, image string, off int64, data []byte) {
	t.Helper()
	ioctx, done := c.AdminIoctx(t)
	defer done()
	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
	harness.Must(t, err, "opening %s", image)
	defer img.Close()
	_, err = img.WriteAt(data, off)
	harness.Must(t, err, "writing %s", image)
	harness.Must(t, img.Flush(), "flushing %s", image)
}

// du is what `rbd du` says the image uses (whole objects).
func du(t *testing.T, c harness.Cluster, image string) int64 {
	t.Helper()
	out, err := c.RBD("du", "--format", "json", "--pool", c.Pool, image)
	harness.Must(t, err, "rbd du")
	var v struct {
		Images []struct {
			Name string `json:"name"`
			Used int64  `json:"used_size"`
		} `json:"images"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &v), "rbd du output %q", out)
	for _, i := range v.Images {
		if i.Name == image {
			return i.Used
		}
	}
	t.Fatalf("rbd du lists no %s: %s", image, out)
	return 0
}

// A detached volume's zero-filled objects go back to Ceph, and the
// usage the call reports before and after is what rbd du says; asked
// again, it gives nothing more back. Without secrets the driver's own
// credentials serve.
func TestControllerReclaimSpaceSparsifies(t *testing.T) {
	e := start(t, "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, harness.LoadCluster(t)))
	id := e.createVolume(t, "reclaim", 32*mib)
	image := imageOf(id)
	data := make([]byte, 4*mib)
	_, _ = rand.Read(data)
	writeAt(t, e.c, image, 0, data)
	writeAt(t, e.c, image, 4*mib, make([]byte, 24*mib))
	before := du(t, e.c, image)

	req := &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id, Parameters: e.c.Params(), Secrets: e.c.Secrets()}
	resp, err := e.reclaim.ControllerReclaimSpace(harness.Ctx(t), req)
	harness.Must(t, err, "ControllerReclaimSpace")
	pre, post := resp.GetPreUsage().GetUsageBytes(), resp.GetPostUsage().GetUsageBytes()
	after := du(t, e.c, image)
	t.Logf("usage %d MiB before, %d MiB after (rbd du: %d MiB, %d MiB)", pre>>20, post>>20, before>>20, after>>20)
	if pre != before || post != after {
		t.Errorf("the call reported %d -> %d bytes, rbd du says %d -> %d", pre, post, before, after)
	}
	if before < 28*mib || after > 4*mib {
		t.Errorf("the sparsify did not give back the 24 MiB of zeros: rbd du %d MiB -> %d MiB", before>>20, after>>20)
	}

	req.Secrets = nil
	resp, err = e.reclaim.ControllerReclaimSpace(harness.Ctx(t), req)
	harness.Must(t, err, "ControllerReclaimSpace again, with the driver's credentials")
	if resp.GetPreUsage().GetUsageBytes() != after || resp.GetPostUsage().GetUsageBytes() != after {
		t.Errorf("asked again: %v, want %d bytes before and after", resp, after)
	}
}

// A volume a client has open is not sparsified (the node's trim frees a
// mounted one), and the call succeeds with the usage unchanged; a
// mirrored copy that is not primary is refused, since a sparsify writes;
// bad requests say what is wrong.
func TestControllerReclaimSpaceRefusals(t *testing.T) {
	e := start(t, "controller")
	id := e.createVolume(t, "reclaim-refused", 16*mib)
	image := imageOf(id)
	writeAt(t, e.c, image, 0, make([]byte, 8*mib))
	before := du(t, e.c, image)
	req := &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id, Secrets: e.c.Secrets()}

	ioctx, done := e.c.AdminIoctx(t)
	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot) // a watch, as a mapping has
	harness.Must(t, err, "opening %s", image)
	resp, err := e.reclaim.ControllerReclaimSpace(harness.Ctx(t), req)
	harness.Must(t, err, "ControllerReclaimSpace of an open volume")
	img.Close()
	done()
	if resp.GetPreUsage().GetUsageBytes() != before || resp.GetPostUsage().GetUsageBytes() != before || du(t, e.c, image) != before {
		t.Errorf("an open volume: %v, rbd du %d; want %d before and after, nothing sparsified", resp, du(t, e.c, image), before)
	}

	spec := e.c.Pool + "/" + image
	for _, args := range [][]string{{"mirror", "pool", "enable", e.c.Pool, "image"}, {"mirror", "image", "enable", spec, "snapshot"}, {"mirror", "image", "demote", spec}} {
		out, err := e.c.RBD(args...)
		harness.Must(t, err, "rbd %v: %s", args, out)
	}
	t.Cleanup(func() {
		for _, args := range [][]string{{"mirror", "image", "promote", "--force", spec}, {"mirror", "image", "disable", "--force", spec}, {"snap", "purge", spec}, {"mirror", "pool", "disable", e.c.Pool}} {
			if out, err := e.c.RBD(args...); err != nil {
				t.Errorf("rbd %v: %v %s", args, err, out)
			}
		}
	})
	_, err = e.reclaim.ControllerReclaimSpace(harness.Ctx(t), req)
	wantCode(t, err, codes.FailedPrecondition, "reclaim of a non-primary copy")
	if du(t, e.c, image) != before {
		t.Errorf("a non-primary copy changed: rbd du %d, was %d", du(t, e.c, image), before)
	}

	for _, c := range []struct {
		what string
		req  *reclaimspace.ControllerReclaimSpaceRequest
		code codes.Code
	}{
		{"no volume_id", &reclaimspace.ControllerReclaimSpaceRequest{Secrets: e.c.Secrets()}, codes.InvalidArgument},
		{"a volume that does not exist", &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id + "x", Secrets: e.c.Secrets()}, codes.NotFound},
		{"a malformed volume_id", &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: "nonsense", Secrets: e.c.Secrets()}, codes.NotFound},
		{"no secrets and no credentials of its own", &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id}, codes.InvalidArgument},
		{"a wrong key", &reclaimspace.ControllerReclaimSpaceRequest{VolumeId: id, Secrets: map[string]string{"userID": e.c.CSIUser, "userKey": "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="}}, codes.PermissionDenied},
	} {
		_, err := e.reclaim.ControllerReclaimSpace(harness.Ctx(t), c.req)
		wantCode(t, err, c.code, c.what)
	}
}
