package controller

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A cluster that makes AES256K keys (Tentacle 20.2.4, Squid 19.2.6 and
// later) gives users keys that older Ceph clients cannot read. The plugin
// either works with such a key (its client is new enough) or answers
// InvalidArgument saying what to do, without handing the key to a client
// that would print it: never an opaque failure. The Ceph
// matrix (scripts/ceph-matrix.sh) says which to expect in
// $RBDCSI_E2E_AES256K_CLIENT; on clusters that make AES keys only there is
// nothing to try.
func TestKeyTypes(t *testing.T) {
	c := harness.LoadCluster(t)
	user := c.Name("client.rbdcsi-aes256k")
	out, err := c.Ceph("auth", "get-or-create", user, "mon", "profile rbd", "osd", "profile rbd pool="+c.Pool, "--key_type", "aes256k")
	if err != nil {
		if strings.Contains(err.Error(), "key_type") || strings.Contains(err.Error(), "Invalid command") {
			t.Skipf("this cluster makes AES keys only: %v", err)
		}
		t.Fatalf("ceph auth get-or-create --key_type aes256k: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := c.Ceph("auth", "rm", user); err != nil {
			t.Errorf("ceph auth rm: %v: %s", err, out)
		}
	})
	out, err = c.Ceph("auth", "print-key", user)
	harness.Must(t, err, "ceph auth print-key: %s", out)
	fields := strings.Fields(out)
	if len(fields) == 0 || !strings.HasPrefix(fields[len(fields)-1], "Ag") {
		t.Fatalf("the key of %s is not an AES256K key (type 2, base64 Ag...)", user)
	}
	kc := c
	kc.CSIUser, kc.CSIKey = strings.TrimPrefix(user, "client."), fields[len(fields)-1]

	e := setup(t)
	e.c = kc
	switch os.Getenv("RBDCSI_E2E_AES256K_CLIENT") {
	case "1":
		vol := e.mustCreate(t, "aes256k-vol", mib)
		e.delete(t, vol.VolumeId)
	case "0":
		_, err := e.create(t, "aes256k-vol", mib)
		wantCode(t, err, codes.InvalidArgument, "CreateVolume with an AES256K key on an old client")
		if !strings.Contains(err.Error(), "AES256K key") || !strings.Contains(err.Error(), "--key_type aes") {
			t.Fatalf("the answer does not say what to do: %v", err)
		}
	default:
		t.Fatal("this cluster makes AES256K keys: set RBDCSI_E2E_AES256K_CLIENT=1 if the plugin's Ceph client can use them (Squid 19.2.6+, Tentacle 20.2.4+), 0 if not")
	}
	// A client that cannot read a key prints it: the plugin must never
	// hand it one.
	if strings.Contains(e.p.Logs(), kc.CSIKey) {
		t.Fatal("the AES256K key is in the plugin log")
	}
}
