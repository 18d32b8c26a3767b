package controller

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A force detach (Kubernetes gave up on node-a, which still has the volume
// staged and reaches the cluster) fences node-a: its client is blocklisted
// for --fence-expiry and the fence recorded, node-a can no longer write,
// and node-b stages the volume and reads what node-a wrote before the
// fence, on a filesystem that checks clean. When node-a unstages, nothing
// is left of the mapping and the fence is lifted. A normal detach
// (unstage first) blocklists nothing.
func TestForceDetachFencesTheOldNode(t *testing.T) {
	s := newMove(t)
	s.fenced = s.e.c.Watchers(t, s.image)
	if len(s.fenced) != 1 {
		t.Fatalf("watchers of the staged image: %v, want node-a's client", s.fenced)
	}
	s.forceDetach(t)
	s.oldNodeCannotWrite(t)
	s.moveToNodeB(t)
	s.oldNodeUnstages(t)
	s.normalDetach(t)
}

// A node cut off from the cluster for longer than the OSDs keep its watch
// (node-a's rbd-fuse stopped) is no watcher any more, but it still holds
// the exclusive lock: the force detach fences it by that lock and breaks
// the lock, node-b takes the volume over, and when node-a is back its
// writes fail, and its unstage leaves nothing and lifts the fence.
func TestForceDetachFencesACutOffNode(t *testing.T) {
	if m := os.Getenv("RBDCSI_E2E_MOUNTER"); m != "" && m != "fuse" {
		t.Skipf("cuts node-a off by stopping its rbd-fuse; mapper %s has none to stop", m)
	}
	s := newMove(t)
	procs, err := harness.RBDFuseProcs(s.a.state)
	harness.Must(t, err, "rbd-fuse processes of node-a")
	if len(procs) != 1 {
		t.Fatalf("node-a runs rbd-fuse processes %v, want one", procs)
	}
	harness.Must(t, syscall.Kill(procs[0], syscall.SIGSTOP), "stopping node-a's rbd-fuse")
	resume := func() { _ = syscall.Kill(procs[0], syscall.SIGCONT) }
	t.Cleanup(resume) // before the unstages of the scenario's cleanup
	deadline := time.Now().Add(90 * time.Second)
	for len(s.e.c.Watchers(t, s.image)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("Ceph still lists the stopped rbd-fuse as a watcher after 90 s")
		}
		time.Sleep(time.Second)
	}
	s.fenced = s.e.c.Lockers(t, s.image)
	if len(s.fenced) != 1 {
		t.Fatalf("lock holders of the image of a cut-off node: %v, want its rbd-fuse", s.fenced)
	}
	s.forceDetach(t)
	if l := s.e.c.Lockers(t, s.image); len(l) != 0 {
		t.Fatalf("the fenced client's lock is still held: %v", l)
	}
	s.moveToNodeB(t)
	resume()
	s.oldNodeCannotWrite(t)
	s.oldNodeUnstages(t)
	s.normalDetach(t)
}

// move is a volume staged on node-a with a file synced to it, on its way
// to node-b; the controller and node-a serve metrics and log at V(1).
// node-b runs here; node-a here too, or on another guest (joint_test.go).
type move struct {
	e           attachEnv
	vol         *csi.Volume
	image       string
	a           oldNode
	ctrlMetrics string
	staging     map[string]string // on each node's machine
	before      []byte
	fenced      []string // node-a's client, as Ceph lists it
}

// oldNode is node-a's machine, its plugin's state directory, which the
// test looks under for leftovers, and its metrics address.
type oldNode struct {
	m              harness.Machine
	state, metrics string
}

// flags are node-a's plugin's flags beyond nodeArgs'.
func (a oldNode) flags(mounter string) []string {
	return []string{"--metrics-address", a.metrics, "--v", "1", "--default-mounter", mounter}
}

// moveCtrlFlags are the controller's flags for a move: fences for ten
// minutes, metrics at addr, logs at V(1).
func moveCtrlFlags(metrics string) []string {
	return []string{"--fence-expiry", "10m", "--metrics-address", metrics, "--v", "1"}
}

// newMove is a move on this machine. node-a's mapper is
// $RBDCSI_E2E_MOUNTER where set: scripts/kernel-test.sh runs this test in
// its guests with krbd and nbd. node-b keeps fuse, for there node-a's
// kernel client would serve node-b's krbd mapping too, as one machine's
// are shared.
func newMove(t *testing.T) *move {
	ctrlMetrics := freeAddr(t)
	e := newAttachEnv(t, moveCtrlFlags(ctrlMetrics)...)
	e.startNode(t, "node-b")
	a := oldNode{m: harness.Local{}, state: t.TempDir(), metrics: freeAddr(t)}
	e.nodes["node-a"] = harness.StartPlugin(t, e.c,
		e.nodeArgs("node-a", e.secretDir, a.state, a.flags(cmp.Or(os.Getenv("RBDCSI_E2E_MOUNTER"), "fuse"))...)...)
	return stageOnNodeA(t, e, ctrlMetrics, a)
}

// stageOnNodeA creates the volume, publishes it to node-a (RWO), stages it
// there and writes and syncs a file on it through node-a's machine.
func stageOnNodeA(t *testing.T, e attachEnv, ctrlMetrics string, a oldNode) *move {
	s := &move{e: e, a: a, ctrlMetrics: ctrlMetrics, staging: map[string]string{}}
	resp, err := s.e.create(t, "force-detach", 64*mib)
	harness.Must(t, err, "create")
	s.vol = resp.Volume
	s.image = s.vol.VolumeId[strings.LastIndex(s.vol.VolumeId, ":")+1:]
	for _, n := range []string{"node-a", "node-b"} {
		s.staging[n] = strings.TrimSpace(harness.MustRun(t, s.machine(n), nil, time.Minute, "mktemp", "-d", "-t", "rbdcsi-force-detach-XXXXXX"))
	}
	// Whatever fails, nothing stays mapped, attached or blocklisted, and
	// the volume goes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), harness.Slowdown()*2*time.Minute)
		defer cancel()
		for _, n := range []string{"node-a", "node-b"} {
			_, _ = s.e.nodes[n].Node().NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.vol.VolumeId, StagingTargetPath: s.staging[n]})
			_, _ = s.e.cc.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: s.vol.VolumeId, NodeId: n, Secrets: s.e.c.Secrets()})
			// Empty once unstaged; never remove what a mount may show.
			_, _ = s.machine(n).Run([]string{"rmdir", s.staging[n]}, nil, time.Minute)
		}
		if _, err := s.e.cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: s.vol.VolumeId, Secrets: s.e.c.Secrets()}); err != nil {
			t.Errorf("delete: %v", err)
		}
		list := s.e.c.Blocklist(t)
		for _, a := range s.fenced {
			if _, ok := list[a]; ok {
				s.e.c.Unblocklist(t, a)
			}
		}
	})

	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	harness.Must(t, s.e.publish(t, s.vol.VolumeId, "node-a", rwo, false), "publish to node-a")
	harness.Must(t, s.e.stage(t, "node-a", s.vol, s.staging["node-a"]), "stage on node-a")
	s.before = bytes.Repeat([]byte("written by node-a before the fence\n"), 4096)
	harness.MustRun(t, s.a.m, s.before, harness.Slowdown()*time.Minute,
		"dd", "of="+filepath.Join(s.staging["node-a"], "before"), "bs=64k", "conv=fsync", "status=none")
	return s
}

// machine is where node n runs.
func (s *move) machine(n string) harness.Machine {
	if n == "node-a" {
		return s.a.m
	}
	return harness.Local{}
}

// forceDetach detaches the volume from node-a, which has not unstaged, and
// checks the fence: node-a's client blocklisted for --fence-expiry, the
// fence recorded, the client gone from the image.
func (s *move) forceDetach(t *testing.T) {
	t.Helper()
	start := time.Now()
	s.e.unpublish(t, s.vol.VolumeId, "node-a")
	until, ok := s.e.c.Blocklist(t)[s.fenced[0]]
	if !ok {
		t.Fatalf("node-a's client %s is not blocklisted: %v", s.fenced[0], s.e.c.Blocklist(t))
	}
	if until.Before(start.Add(9*time.Minute)) || until.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("blocklisted until %v, want about --fence-expiry (10m) from %v", until, start)
	}
	if got := fenceRecords(t, s.e.c); !slices.Equal(got, []string{"fenced/node-a/" + s.vol.VolumeId}) {
		t.Fatalf("fence records %v, want node-a's of the volume", got)
	}
	if w := s.e.c.Watchers(t, s.image); len(w) != 0 {
		t.Fatalf("the fenced client still watches the image: %v", w)
	}
	expectMetrics(t, s.ctrlMetrics, `rbdcsi_fences_total{result="success"} 1`)
}

// lateWriteBound is how long node-a's write after the fence may take to
// fail: a node that was cut off first has to reconnect (libceph waits up
// to 15 s between attempts) to hear that it is blocklisted, and emulation
// and a busy host slow that down.
const lateWriteBound = 2 * time.Minute

// lateMarker is what node-a writes after the fence: normalDetach looks
// for it in the image, where it must never be.
var lateMarker = []byte("written by node-a after the fence\n")

// oldNodeCannotWrite: a write and fsync through node-a's staging mount
// does not hang, and fails, except where rbd-fuse answers it from its
// cache: a stopped rbd-fuse, resumed, may acknowledge an fsync before it
// hears of its fence. What the fence promises is that no such write
// reaches the volume, which normalDetach checks in the image itself. The
// write runs in a process of its own, so a write that hangs cannot hang
// the test.
func (s *move) oldNodeCannotWrite(t *testing.T) {
	t.Helper()
	start := time.Now()
	r, err := s.a.m.Run([]string{"dd", "of=" + filepath.Join(s.staging["node-a"], "after"), "bs=64k", "conv=fsync", "status=none"},
		bytes.Repeat(lateMarker, (1<<20)/len(lateMarker)), lateWriteBound)
	harness.Must(t, err, "writing on node-a")
	switch {
	case r.TimedOut:
		t.Fatal("a write on node-a after the fence hung instead of failing")
	case r.Exit == 0 && s.mapper() != "fuse":
		t.Fatalf("node-a wrote and synced to the volume through %s after the fence", s.mapper())
	case r.Exit == 0:
		t.Logf("node-a's rbd-fuse acknowledged a write and its fsync after the fence, in %.1fs; the image must not hold it", time.Since(start).Seconds())
	default:
		t.Logf("node-a's write after the fence failed in %.1fs: %s", time.Since(start).Seconds(), strings.TrimSpace(r.Output))
	}
}

// mapper is node-a's mapper.
func (s *move) mapper() string { return cmp.Or(os.Getenv("RBDCSI_E2E_MOUNTER"), "fuse") }

// moveToNodeB: node-b stages the volume and reads what node-a synced
// before the fence.
func (s *move) moveToNodeB(t *testing.T) {
	t.Helper()
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	harness.Must(t, s.e.publish(t, s.vol.VolumeId, "node-b", rwo, false), "publish to node-b")
	harness.Must(t, s.e.stage(t, "node-b", s.vol, s.staging["node-b"]), "stage on node-b")
	got, err := os.ReadFile(filepath.Join(s.staging["node-b"], "before"))
	if err != nil || !bytes.Equal(got, s.before) {
		t.Fatalf("node-b reads %d bytes of the file node-a synced (%v), want %d", len(got), err, len(s.before))
	}
}

// oldNodeUnstages: node-a's unstage of the blocklisted mapping succeeds,
// leaves nothing, and lifts the fence; both ends logged what they did,
// never with a key.
func (s *move) oldNodeUnstages(t *testing.T) {
	t.Helper()
	s.e.unstage(t, "node-a", s.vol, s.staging["node-a"])
	left, err := s.a.m.Leftovers(s.a.state, s.staging["node-a"])
	harness.Must(t, err, "leftovers of node-a")
	if len(left) > 0 {
		t.Fatalf("node-a's unstage left %v", left)
	}
	if _, ok := s.e.c.Blocklist(t)[s.fenced[0]]; ok {
		t.Fatalf("node-a's client %s is still blocklisted after its unstage", s.fenced[0])
	}
	if got := fenceRecords(t, s.e.c); len(got) != 0 {
		t.Fatalf("fence records %v after node-a's unstage", got)
	}
	expectMetrics(t, s.a.metrics, `rbdcsi_fence_lifts_total{result="success"} 1`)
	for who, log := range map[string]string{"controller": s.e.p.Logs(), "node-a": s.e.nodes["node-a"].Logs()} {
		want := map[string]string{"controller": "fenced a node", "node-a": "lifted the fence"}[who]
		if !strings.Contains(log, want) || !strings.Contains(log, s.fenced[0]) || !strings.Contains(log, s.vol.VolumeId) {
			t.Errorf("the %s's log does not say %q with the volume and client %s:\n%s", who, want, s.fenced[0], log)
		}
		if strings.Contains(log, s.e.c.CSIKey) {
			t.Errorf("the %s's log holds the CSI user's key", who)
		}
	}
}

// normalDetach: node-b unstages first, so its detach blocklists nothing,
// and the volume's ext4 checks clean. Only node-b's clients are looked
// for on the blocklist: it is the cluster's, which another instance of the
// suite (scripts/instances.sh) may be fencing its own node in at the time.
func (s *move) normalDetach(t *testing.T) {
	t.Helper()
	nodeB := s.e.c.Watchers(t, s.image)
	if len(nodeB) == 0 {
		t.Fatal("node-b has the volume staged, yet nothing watches its image")
	}
	s.e.unstage(t, "node-b", s.vol, s.staging["node-b"])
	s.e.unpublish(t, s.vol.VolumeId, "node-b")
	list := s.e.c.Blocklist(t)
	for _, a := range nodeB {
		if _, ok := list[a]; ok {
			t.Errorf("the normal detach blocklisted node-b's client %s", a)
		}
	}
	if got := fenceRecords(t, s.e.c); len(got) != 0 {
		t.Fatalf("fence records %v after a normal detach", got)
	}
	expectMetrics(t, s.ctrlMetrics, `rbdcsi_fences_total{result="success"} 1`)
	if bytes.Contains(fsckClean(t, s.e.c, s.image), lateMarker) {
		t.Fatal("what node-a wrote after the fence is in the image")
	}
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
// node-a did after the fence, and nothing the move did, damaged it. It
// returns the image's content.
func fsckClean(t *testing.T, c harness.Cluster, image string) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "image")
	out, err := c.RBD(append([]string{"export", c.Pool + "/" + image, file}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rbd export: %s", out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "e2fsck", "-fn", file).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn of the volume: %v\n%s", err, out)
	}
	data, err := os.ReadFile(file)
	harness.Must(t, err, "reading the exported image")
	return data
}
