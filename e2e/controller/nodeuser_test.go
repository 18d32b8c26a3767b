package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// The node plugins' own Ceph user, with the caps
// docs/install.md#3-the-ceph-users gives it, is enough for the heartbeat that makes a node
// attachable, and not for removing an image, forging an attachment or
// fencing a client (it may only lift blocklist entries, its fences).
// Without the registry object in its caps, a node plugin does not start
// and says which user lacks which cap; a controller call whose user may
// only read the pool does not attach, and says the same.
func TestNodeUserCanOnlyHeartbeat(t *testing.T) {
	e := setupAttach(t)
	user := e.c.Name("rbdcsi-node-e2e")
	key := e.c.NewUser(t, user, nodeUserCaps(e.c)...)
	dir := writeSecretDir(t, user, key)
	e.startNode(t, "node-restricted", "--node-secret-dir", dir) // the last --node-secret-dir wins

	v := e.mustCreate(t, "node-user", 8*mib).VolumeId
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	harness.Must(t, e.publish(t, v, "node-restricted", rwo, false), "publish to the node whose heartbeat the restricted user writes")
	e.unpublish(t, v, "node-restricted")

	image := e.c.Pool + "/" + v[strings.LastIndex(v, ":")+1:]
	keyFile := filepath.Join(dir, "key")
	harness.Must(t, os.WriteFile(keyFile, []byte(key), 0o600), "write the key file")
	as := func(tool string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, tool, append([]string{"-c", e.c.Conf, "--id", user, "--keyfile", keyFile}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := as("rbd", "image-meta", "set", image, "rbdcsi.attach/node-evil", "rw:SINGLE_NODE_WRITER"); err == nil {
		t.Errorf("the node user forged an attachment record: %s", out)
	}
	if out, err := as("rbd", "rm", image); err == nil {
		t.Errorf("the node user removed an image: %s", out)
	}
	if out, err := as("ceph", "osd", "blocklist", "add", "127.0.0.1:0/1", "60"); err == nil {
		_, _ = e.c.Ceph("osd", "blocklist", "rm", "127.0.0.1:0/1")
		t.Errorf("the node user blocklisted a client: %s", out)
	}
	if !slices.Contains(strings.Fields(strings.Join(e.c.Images(t), " ")), v[strings.LastIndex(v, ":")+1:]) {
		t.Fatal("the image is gone")
	}
	if got := e.publishedNodes(t, v); len(got) != 0 {
		t.Errorf("attached to %v after the node user's attempts", got)
	}

	reader := e.c.Name("rbdcsi-e2e-attach-reader")
	readerKey := e.c.NewUser(t, reader, "mon", "profile rbd", "osd", "profile rbd-read-only pool="+e.c.Pool)
	_, err := e.cc.ControllerPublishVolume(harness.Ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v, NodeId: "node-restricted",
		VolumeCapability: rwo, Secrets: map[string]string{"userID": reader, "userKey": readerKey}})
	wantWords(t, err, codes.PermissionDenied, readerKey, "publish as a user that may only read the pool",
		"Ceph refused client."+reader+" on "+cluster.OnPool(e.c.Namespace, e.c.Pool)+":", cluster.CapRBD(e.c.Namespace, e.c.Pool), cluster.CapsDoc)
	if got := e.publishedNodes(t, v); len(got) != 0 {
		t.Errorf("attached to %v by a refused publish", got)
	}
	e.delete(t, v)

	denied := e.c.Name("rbdcsi-node-e2e-denied")
	deniedKey := e.c.NewUser(t, denied, "mon", "allow r", "osd", "allow rwx pool="+e.c.Pool+" object_prefix rbdcsi.other")
	r := harness.Run(harness.PluginArgv(t, e.c, e.nodeArgs("node-denied", writeSecretDir(t, denied, deniedKey), t.TempDir())...), nil, time.Minute)
	if r.Exit == 0 || r.TimedOut {
		t.Fatalf("a node plugin whose user may not write the node registry: %+v", r)
	}
	for _, w := range []string{"the first heartbeat of node node-denied", "Ceph refused client." + denied + " on object " + e.c.Object("rbdcsi.nodes"),
		cluster.CapRegistry(e.c.Pool, e.c.Namespace, "rbdcsi.nodes"), cluster.CapsDoc} {
		if !strings.Contains(r.Output, w) {
			t.Errorf("the node plugin's last words do not say %q:\n%s", w, r.Output)
		}
	}
	if strings.Contains(r.Output, deniedKey) {
		t.Error("the node plugin's log shows the key")
	}
}

// wantWords checks err's code and that its message has each of words and
// not secret.
func wantWords(t *testing.T, err error, code codes.Code, secret, what string, words ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("%s: the error shows the key", what)
	}
}
