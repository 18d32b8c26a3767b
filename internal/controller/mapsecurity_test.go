package controller_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/controller"
)

// A class that switches off cephx signatures or data CRCs is refused,
// naming the option and the flag that allows it, and makes no image;
// with --allow-insecure-map-options it is taken.
func TestInsecureMapOptionsNeedTheFlag(t *testing.T) {
	for _, allow := range []bool{false, true} {
		e := newEnv(t)
		c := e.start("", controller.Options{AllowInsecureMapOptions: allow})
		for _, opts := range []string{"nocrc", "krbd:lock_on_read,nocephx_require_signatures", "nbd:try-netlink;krbd:nocephx_sign_messages"} {
			resp, err := c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
				Name: "insecure", CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: fsCaps(),
				Parameters: map[string]string{"clusterID": clusterID, "pool": poolName, "mapOptions": opts}, Secrets: secrets(),
			})
			if allow {
				must(t, err, "CreateVolume with "+opts+", allowed")
				c.delete(t, resp.Volume.VolumeId)
				continue
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--allow-insecure-map-options") {
				t.Errorf("mapOptions %s: %v, want InvalidArgument naming --allow-insecure-map-options", opts, err)
			}
			if imgs := e.images(); len(imgs) != 0 {
				t.Errorf("mapOptions %s refused, yet images %v", opts, imgs)
			}
		}
	}
}
