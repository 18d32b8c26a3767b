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
// docs/install.md#3-the-ceph-users gives it, is enough for the heartbeat that
// makes a node attachable and for staging a volume with no secrets in the
// call, and not for creating, removing, renaming or trashing images, nor
// for an image in another pool. (It may snapshot and resize: the holder of
// an image's exclusive lock carries out those the controller asks of a
// mapped image: e2e/node's snapshot and growth tests take them of volumes
// staged as this user.) Without the
// registry object in its caps, a node plugin does not start and says which
// user lacks which cap; a controller call whose user may only read the
// pool does not attach, and says the same.
func TestNodeUserCanOnlyStage(t *testing.T) {
	e := setupAttach(t)
	dir, user, key := e.c.NodeSecretDir(t, "rbdcsi-node-e2e")
	e.startNode(t, "node-restricted", "--node-secret-dir", dir) // the last --node-secret-dir wins

	vol := e.mustCreate(t, "node-user", 64*mib)
	v := vol.VolumeId
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	harness.Must(t, e.publish(t, v, "node-restricted", rwo, false), "publish to the node whose heartbeat the restricted user writes")
	staging := t.TempDir()
	harness.Must(t, e.stage(t, "node-restricted", vol, staging), "stage, with no secrets, as the node user")
	harness.Must(t, os.WriteFile(filepath.Join(staging, "written-by-the-node-user"), []byte("x"), 0o600), "write to the staged volume")
	e.unstage(t, "node-restricted", vol, staging)
	e.unpublish(t, v, "node-restricted")

	image := e.c.Pool + "/"
	if e.c.Namespace != "" {
		image += e.c.Namespace + "/"
	}
	keyFile := filepath.Join(dir, "key")
	harness.Must(t, os.WriteFile(keyFile, []byte(key), 0o600), "write the key file")
	as := func(tool string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// runs: rbd
		out, err := exec.CommandContext(ctx, tool, append([]string{"-c", e.c.Conf, "--id", user, "--keyfile", keyFile}, args...)...).CombinedOutput()
		return string(out), err
	}
	// Elsewhere: an image in a pool the user was given nothing of.
	other := e.c.Name("rbdcsi-other")
	out, err := e.c.Ceph("osd", "pool", "create", other, "8", "8")
	harness.Must(t, err, "ceph osd pool create: %s", out)
	elsewhere := other + "/img"
	t.Cleanup(func() {
		if out, err := e.c.Ceph("osd", "pool", "rm", other, other, "--yes-i-really-really-mean-it"); err != nil {
			t.Errorf("ceph osd pool rm: %v: %s", err, out)
		}
	})
	out, err = e.c.RBD("pool", "init", other)
	harness.Must(t, err, "rbd pool init: %s", out)
	out, err = e.c.RBD("create", "--size", "8M", elsewhere)
	harness.Must(t, err, "rbd create elsewhere: %s", out)
	t.Cleanup(func() { _, _ = e.c.RBD("rm", elsewhere) })
	name := v[strings.LastIndex(v, ":")+1:]
	for what, args := range map[string][]string{
		"created an image":         {"rbd", "create", "--size", "8M", image + "made-by-the-node-user"},
		"removed an image":         {"rbd", "rm", image + name},
		"renamed an image":         {"rbd", "rename", image + name, image + "renamed-by-the-node-user"},
		"trashed an image":         {"rbd", "trash", "mv", image + name},
		"read an image elsewhere":  {"rbd", "export", elsewhere, "-"},
		"wrote an image elsewhere": {"rbd", "bench", "--io-type", "write", "--io-total", "1M", elsewhere},
	} {
		if out, err := as(args[0], args[1:]...); err == nil {
			t.Errorf("the node user %s: %s", what, out)
		}
	}
	if !slices.Contains(e.c.Images(t), name) {
		t.Fatal("the image is gone")
	}
	if got := e.publishedNodes(t, v); len(got) != 0 {
		t.Errorf("attached to %v after the node user's attempts", got)
	}

	reader := e.c.Name("rbdcsi-e2e-attach-reader")
	readerKey := e.c.NewUser(t, reader, "mon", "profile rbd", "osd", "profile rbd-read-only pool="+e.c.Pool)
	_, err = e.cc.ControllerPublishVolume(harness.Ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v, NodeId: "node-restricted",
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
