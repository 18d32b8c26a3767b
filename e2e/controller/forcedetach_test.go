package controller

import (
	"bytes"
	"context"
	"errors"
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

// A force detach (Kubernetes gave up on node-a, which still has the volume
// staged) fences node-a: its client is blocklisted for --fence-expiry and
// the fence recorded, node-a can no longer write, and node-b stages the
// volume and reads what node-a wrote before the fence, on a filesystem
// that checks clean. When node-a comes back and unstages, nothing is left
// of the mapping and the fence is lifted. A normal detach (unstage first)
// blocklists nothing.
func TestForceDetachFencesTheOldNode(t *testing.T) {
	ctrlMetrics := freeAddr(t)
	e := setupAttach(t, "--fence-expiry", "10m", "--metrics-address", ctrlMetrics, "--v", "1")
	// node-a again, with a state directory the test looks under for
	// leftovers, and metrics.
	nodeMetrics, stateA := freeAddr(t), t.TempDir()
	e.nodes["node-a"].Stop()
	e.startNode(t, "node-a", "--state-dir", stateA, "--metrics-address", nodeMetrics, "--v", "1")

	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	resp, err := e.create(t, "force-detach", 64*mib)
	harness.Must(t, err, "create")
	vol := resp.Volume
	image := vol.VolumeId[strings.LastIndex(vol.VolumeId, ":")+1:]
	staging := map[string]string{}
	for _, n := range []string{"node-a", "node-b"} {
		dir, err := os.MkdirTemp("", "rbdcsi-force-detach-")
		harness.Must(t, err, "staging dir")
		staging[n] = dir
	}
	// Whatever fails, nothing stays mapped, attached or blocklisted, and
	// the volume goes.
	var fenced []string
	t.Cleanup(func() {
		ctx := context.Background()
		for _, n := range []string{"node-a", "node-b"} {
			_, _ = e.nodes[n].Node().NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: staging[n]})
			_, _ = e.cc.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: n, Secrets: e.c.Secrets()})
			_ = os.Remove(staging[n]) // empty once unstaged; never RemoveAll a possible mount
		}
		if _, err := e.cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId, Secrets: e.c.Secrets()}); err != nil {
			t.Errorf("delete: %v", err)
		}
		list := e.c.Blocklist(t)
		for _, a := range fenced {
			if _, ok := list[a]; ok {
				e.c.Unblocklist(t, a)
			}
		}
	})

	harness.Must(t, e.publish(t, vol.VolumeId, "node-a", rwo, false), "publish to node-a")
	harness.Must(t, e.stage(t, "node-a", vol, staging["node-a"]), "stage on node-a")
	before := bytes.Repeat([]byte("written by node-a before the fence\n"), 4096)
	writeSynced(t, filepath.Join(staging["node-a"], "before"), before)
	fenced = e.c.Watchers(t, image)
	if len(fenced) != 1 {
		t.Fatalf("watchers of the staged image: %v, want node-a's rbd-fuse", fenced)
	}

	// The force detach: node-a has not unstaged.
	start := time.Now()
	e.unpublish(t, vol.VolumeId, "node-a")
	until, ok := e.c.Blocklist(t)[fenced[0]]
	if !ok {
		t.Fatalf("node-a's client %s is not blocklisted: %v", fenced[0], e.c.Blocklist(t))
	}
	if until.Before(start.Add(10*time.Minute-time.Minute)) || until.After(time.Now().Add(10*time.Minute+time.Minute)) {
		t.Errorf("blocklisted until %v, want about --fence-expiry (10m) from %v", until, start)
	}
	if got := fenceRecords(t, e.c); !slices.Equal(got, []string{"fenced/node-a/" + vol.VolumeId}) {
		t.Fatalf("fence records %v, want node-a's of the volume", got)
	}
	if w := e.c.Watchers(t, image); len(w) != 0 {
		t.Fatalf("the fenced client still watches the image: %v", w)
	}
	switch err := writeWithTimeout(filepath.Join(staging["node-a"], "after"), time.Minute); {
	case err == nil:
		t.Fatal("node-a wrote and synced to the volume after the fence")
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatal("a write on node-a after the fence hung instead of failing")
	default:
		t.Logf("node-a's write after the fence: %v", err)
	}
	expectMetrics(t, ctrlMetrics, `rbdcsi_fences_total{result="success"} 1`)

	// The volume moves: node-b stages it (taking the dead client's lock)
	// and reads what node-a synced before the fence.
	harness.Must(t, e.publish(t, vol.VolumeId, "node-b", rwo, false), "publish to node-b")
	harness.Must(t, e.stage(t, "node-b", vol, staging["node-b"]), "stage on node-b")
	got, err := os.ReadFile(filepath.Join(staging["node-b"], "before"))
	if err != nil || !bytes.Equal(got, before) {
		t.Fatalf("node-b reads %d bytes of the file node-a synced (%v), want %d", len(got), err, len(before))
	}

	// node-a comes back: its unstage of the blocklisted mapping succeeds,
	// leaves nothing, and lifts the fence.
	e.unstage(t, "node-a", vol, staging["node-a"])
	left, err := harness.FindLeftovers(stateA)
	harness.Must(t, err, "leftovers of node-a")
	if mounts, _ := harness.MountsUnder(staging["node-a"]); !left.Empty() || len(mounts) > 0 {
		t.Fatalf("node-a's unstage left %v, mounts %v", left.Describe(), mounts)
	}
	if _, ok := e.c.Blocklist(t)[fenced[0]]; ok {
		t.Fatalf("node-a's client %s is still blocklisted after its unstage", fenced[0])
	}
	if got := fenceRecords(t, e.c); len(got) != 0 {
		t.Fatalf("fence records %v after node-a's unstage", got)
	}
	expectMetrics(t, nodeMetrics, `rbdcsi_fence_lifts_total{result="success"} 1`)
	// Both ends say what they did, by volume, node and client, and never
	// with a key.
	for who, log := range map[string]string{"controller": e.p.Logs(), "node-a": e.nodes["node-a"].Logs()} {
		want := map[string]string{"controller": "fenced a node", "node-a": "lifted the fence"}[who]
		if !strings.Contains(log, want) || !strings.Contains(log, fenced[0]) || !strings.Contains(log, vol.VolumeId) {
			t.Errorf("the %s's log does not say %q with the volume and client %s:\n%s", who, want, fenced[0], log)
		}
		if strings.Contains(log, e.c.CSIKey) {
			t.Errorf("the %s's log holds the CSI user's key", who)
		}
	}

	// A normal detach: node-b unstages first, and nothing is blocklisted.
	listed := e.c.Blocklist(t)
	e.unstage(t, "node-b", vol, staging["node-b"])
	e.unpublish(t, vol.VolumeId, "node-b")
	for a := range e.c.Blocklist(t) {
		if _, ok := listed[a]; !ok {
			t.Errorf("the normal detach blocklisted %s", a)
		}
	}
	if got := fenceRecords(t, e.c); len(got) != 0 {
		t.Fatalf("fence records %v after a normal detach", got)
	}
	expectMetrics(t, ctrlMetrics, `rbdcsi_fences_total{result="success"} 1`)
	fsckClean(t, e.c, image)
}

// writeSynced writes a file and fsyncs it.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	harness.Must(t, err, "create %s", path)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	harness.Must(t, err, "write and sync %s", path)
}

// writeWithTimeout writes and fsyncs 1 MiB in a process of its own, so a
// write that hangs cannot hang the test: context.DeadlineExceeded then.
func writeWithTimeout(path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dd", "if=/dev/zero", "of="+path, "bs=64k", "count=16", "conv=fsync").CombinedOutput()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

// fenceRecords lists the fence records in the suite's node registry.
func fenceRecords(t *testing.T, c harness.Cluster) []string {
	t.Helper()
	out, err := c.Rados(append([]string{"-p", c.Pool, "listomapkeys", c.Object("rbdcsi.nodes")}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rados listomapkeys: %s", out)
	var keys []string
	for _, k := range strings.Fields(out) {
		if strings.HasPrefix(k, "fenced/") {
			keys = append(keys, k)
		}
	}
	return keys
}

// fsckClean exports the image and checks its ext4 read-only: nothing
// node-a did after the fence, and nothing the move did, damaged it.
func fsckClean(t *testing.T, c harness.Cluster, image string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "image")
	out, err := c.RBD(append([]string{"export", c.Pool + "/" + image, file}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd export: %s", out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "e2fsck", "-fn", file).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn of the volume: %v\n%s", err, out)
	}
}
