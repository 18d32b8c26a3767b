package node

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// cryptBinding is the image of volID, which the fixture's DEK is bound to.
var cryptBinding = kms.Binding{KMSID: "tenant-a", Pool: "rbd", Image: "csi-vol-0123456789abcdef0123"}

// A key record copied from another image, or from another pool with an
// image of the same name, unwraps with the right KEK but not here: the
// stage is refused before anything is mapped.
func TestEncryptedStageRefusesAKeyRecordOfAnotherImage(t *testing.T) {
	for name, c := range map[string]struct {
		at   kms.Binding
		code codes.Code
	}{
		"another image": {kms.Binding{KMSID: "tenant-a", Pool: "rbd", Image: "csi-vol-ffffffffffffffffffff"}, codes.PermissionDenied},
		"another pool":  {kms.Binding{KMSID: "tenant-a", Pool: "rbd2", Image: cryptBinding.Image}, codes.PermissionDenied},
		"same image":    {cryptBinding, codes.OK},
	} {
		t.Run(name, func(t *testing.T) {
			f := newCryptFixture(t)
			kek, err := base64.StdEncoding.DecodeString(f.kek)
			if err != nil {
				t.Fatal(err)
			}
			w, err := kms.Wrap("k1", kek, f.dek, c.at)
			if err != nil {
				t.Fatal(err)
			}
			f.images.md[kms.MetaDEK] = string(w)
			_, err = f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
			if status.Code(err) != c.code {
				t.Fatalf("stage with a key record made for %s: %v, want %v", c.at, err, c.code)
			}
			if c.code == codes.OK {
				return
			}
			if !strings.Contains(err.Error(), "copied from another image") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			if len(f.m.maps) != 0 || len(f.crypt.calls) != 0 {
				t.Errorf("a refused stage mapped %v or ran %v", f.m.maps, f.crypt.calls)
			}
		})
	}
}
