package node

import (
	"context"
	"encoding/base64"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmip/kmiptest"
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

// A KMS that cannot be reached is Unavailable (kubelet retries the stage),
// never a volume staged without its key.
func TestEncryptedStageWithTheKMSDownIsUnavailable(t *testing.T) {
	f := newCryptFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nothing listens there now
	f.n.kms = kms.Config{"tenant-a": {Type: kms.TypeKMIP, Endpoint: down, KeyID: "1"}}
	pki := kmiptest.NewPKI(t)
	cert, key := pki.Client(t, "node")
	b64 := base64.RawURLEncoding.EncodeToString
	f.images.md[kms.MetaDEK] = strings.Join([]string{"k1", "1", b64(make([]byte, 12)), b64(make([]byte, 32)), b64(make([]byte, 16))}, ".")
	req := f.stageReq(fsCap(rwo))
	req.Secrets["kmipCA"], req.Secrets["kmipClientCert"], req.Secrets["kmipClientKey"] = string(pki.CA), string(cert), string(key)
	_, err = f.n.NodeStageVolume(context.Background(), req)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stage with the KMS down: %v, want Unavailable", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") || len(f.m.maps) != 0 || len(f.crypt.calls) != 0 {
		t.Errorf("a stage without its key mapped %v or ran %v, or showed the client key: %v", f.m.maps, f.crypt.calls, err)
	}
}
