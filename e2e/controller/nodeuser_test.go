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

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The node plugins' own Ceph user, with the caps
// docs/install.md#3-the-ceph-users gives it, is enough for the heartbeat that makes a node
// attachable, and not for removing an image, forging an attachment or
// fencing a client (it may only lift blocklist entries, its fences).
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
	e.delete(t, v)
}
