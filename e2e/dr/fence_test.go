package dr

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/attach"
)

// While site B replays a volume of A, B's rbd-mirror watches A's primary
// image, from site B's address (scripts/dr-cluster.sh runs each site's
// daemon from its own). A detach on A fences the node's clients and only
// them: the node recorded at its stage the address it reaches A from.
//
// A's node plugin (rbd-fuse) stages the volume; ControllerUnpublishVolume
// on A without an unstage first (a forced detach, the node still mapping
// it) blocklists the node's client on A, never B's rbd-mirror, which keeps
// its very watch (a blocklisted daemon would come back as another client
// instance) and its replay: a later write reaches B with the next mirror
// snapshot. The volume health names the fenced node and its client alone;
// the node's unstage lifts the fence, and the health is clean again.
// Then a normal detach (unstage first) fences no one at all.
func TestDetachSparesThePeersMirror(t *testing.T) {
	t.Parallel() // after TestFailoverAndFailback, which cuts site a off
	ca, cb := clusters(t)
	const node = "dr-fence-a"
	a := start(t, "a", ca, cb.ClusterID, append(registryArgs(ca), "--controller-secret-dir", harness.WriteControllerSecretDir(t, ca))...)
	b := start(t, "b", cb, ca.ClusterID)
	nodeA := a.startNode(t, append(registryArgs(ca), "--nodeid", node)...)
	const size = 8 * mib
	id := a.createVolume(t, b, "dr-fence", size)
	image := imageOf(t, id)
	rwo := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	t.Cleanup(func() {
		if t.Failed() { // the test unpublishes at its end; else the index entry
			_, _ = a.c.Rados("-p", a.c.Pool, "rmomapkey", "rbdcsi.nodes", "attach/"+node+"/"+id)
		}
	})

	harness.Must(t, a.enable(t, id, nil), "Enable on A")
	b.waitReplaying(t, image)
	siteB := siteIP(t, cb)
	var mirrorB string
	eventually(t, "B's rbd-mirror watching A's primary from site B's address", time.Minute, func() (bool, string) {
		w := ca.Watchers(t, image)
		i := slices.IndexFunc(w, func(a string) bool { return ipOf(a) == siteB })
		if i < 0 {
			return false, strings.Join(w, " ")
		}
		mirrorB = w[i]
		return true, ""
	})

	publish := func() {
		_, err := a.cc.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: rwo, Secrets: a.secrets()})
		harness.Must(t, err, "ControllerPublish on A")
	}
	unpublish := func(what string) {
		_, err := a.cc.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node, Secrets: a.secrets()})
		harness.Must(t, err, "ControllerUnpublish on A (%s)", what)
	}
	staging := filepath.Join(t.TempDir(), "staging")
	harness.Must(t, os.MkdirAll(staging, 0o750), "mkdir staging")
	unstage := func() error {
		_, err := nodeA.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		return err
	}
	// stage stages the volume on A's node and returns the address of its
	// client, the watcher of A's image other than B's rbd-mirror.
	stage := func() string {
		_, err := nodeA.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwo,
			PublishContext: map[string]string{attach.PublishContextNode: node}})
		harness.Must(t, err, "NodeStage on A's node")
		t.Cleanup(func() { _ = unstage() }) // a repeated unstage is fine
		w := slices.DeleteFunc(ca.Watchers(t, image), func(a string) bool { return a == mirrorB })
		if len(w) != 1 {
			t.Fatalf("watchers of A's image besides B's rbd-mirror %s: %v, want the node's client alone", mirrorB, w)
		}
		return w[0]
	}

	publish()
	client := stage()
	// The node recorded the IP its client's watch shows, and it is not B's.
	addrKey := "addr/" + node + "/" + ca.ClusterID
	if got, ok := a.omapValue(t, addrKey); !ok || got != ipOf(client) {
		t.Fatalf("the registry's %s is %q (recorded: %v), want the IP of the node's client %s", addrKey, got, ok, client)
	}
	if ipOf(client) == siteB {
		t.Fatalf("the node's client %s and B's rbd-mirror %s share an address: this test proves nothing", client, mirrorB)
	}

	unpublish("forced: the node still maps it")
	bl := ca.Blocklist(t)
	if _, ok := bl[client]; !ok {
		t.Fatalf("the node's client %s is not blocklisted on A: %v", client, bl)
	}
	for addr := range bl {
		if ipOf(addr) == siteB {
			t.Fatalf("B's rbd-mirror is blocklisted on A: %s (blocklist %v)", addr, bl)
		}
	}
	if got, ok := a.omapValue(t, "fenced/"+node+"/"+id); !ok || len(strings.Fields(got)) != 2 || strings.Fields(got)[1] != client {
		t.Fatalf("fence record %q (%v), want the node's client %s alone", got, ok, client)
	}
	if w := ca.Watchers(t, image); !slices.Equal(w, []string{mirrorB}) {
		t.Fatalf("watchers of A's image after the fence: %v, want B's rbd-mirror's %s, as before", w, mirrorB)
	}
	if fenced := a.nodeFenced(t, id); len(fenced) != 1 || !strings.Contains(fenced[0], node) ||
		!strings.Contains(fenced[0], client) || strings.Contains(fenced[0], siteB) {
		t.Fatalf("NodeFenced health of the volume on A: %q, want one naming %s and its client %s alone", fenced, node, client)
	}

	// Replication goes on: a write on A reaches B with the next mirror
	// snapshot.
	sum := a.write(t, image, 1*mib, size)
	a.mirrorSnapshot(t, image)
	b.waitData(t, image, sum, "B's copy reading A's write after the detach")
	b.waitReplaying(t, image)
	if w := ca.Watchers(t, image); !slices.Contains(w, mirrorB) {
		t.Fatalf("watchers of A's image: %v, want B's rbd-mirror's %s still", w, mirrorB)
	}

	// The node lifts its fence at unstage.
	harness.Must(t, unstage(), "NodeUnstage on A's node")
	if _, ok := ca.Blocklist(t)[client]; ok {
		t.Fatalf("the node's client %s is still blocklisted after its unstage", client)
	}
	if _, ok := a.omapValue(t, "fenced/"+node+"/"+id); ok {
		t.Fatal("the fence record stays after the node's unstage")
	}
	if fenced := a.nodeFenced(t, id); len(fenced) != 0 {
		t.Fatalf("NodeFenced health of the volume on A after the unstage: %q, want none", fenced)
	}

	// A normal detach: nothing left of the node, B's rbd-mirror alone.
	publish()
	client = stage()
	harness.Must(t, unstage(), "NodeUnstage on A's node")
	unpublish("normal")
	for addr := range ca.Blocklist(t) {
		if addr == client || ipOf(addr) == siteB {
			t.Fatalf("a normal detach blocklisted %s", addr)
		}
	}
	if _, ok := a.omapValue(t, "fenced/"+node+"/"+id); ok {
		t.Fatal("a normal detach recorded a fence")
	}
	if fenced := a.nodeFenced(t, id); len(fenced) != 0 {
		t.Fatalf("NodeFenced health of the volume on A after a normal detach: %q", fenced)
	}
	if w := ca.Watchers(t, image); !slices.Equal(w, []string{mirrorB}) {
		t.Fatalf("watchers of A's image after a normal detach: %v, want B's rbd-mirror's %s", w, mirrorB)
	}

	harness.Must(t, a.disable(t, id), "Disable on A")
	eventually(t, "B's copy removed", 2*time.Minute, func() (bool, string) { return !b.has(image), "still there" })
	_, err := a.cc.DeleteVolume(ctx(t), deleteReq(a, id))
	harness.Must(t, err, "DeleteVolume on A")
}

// registryArgs run a plugin with the site's node registry.
func registryArgs(c harness.Cluster) []string {
	return []string{"--node-registry", c.ClusterID + "/" + c.Pool, "--node-registry-ttl", "30s"}
}

// siteIP is the IPv4 address the site's monitor listens on.
func siteIP(t *testing.T, c harness.Cluster) string {
	ip := regexp.MustCompile(`\d+\.\d+\.\d+\.\d+`).FindString(c.MonHost)
	if ip == "" {
		t.Fatalf("no IPv4 address in the monitor address %q", c.MonHost)
	}
	return ip
}

// ipOf is the IP of a client address ("ip:port/nonce", IPv4).
func ipOf(addr string) string {
	ip, _, _ := strings.Cut(addr, ":")
	return ip
}

// omapValue reads a key of the site's node registry object.
func (s *site) omapValue(t *testing.T, key string) (string, bool) {
	keys, err := s.c.Rados("-p", s.c.Pool, "listomapkeys", "rbdcsi.nodes")
	harness.Must(t, err, "rados listomapkeys on site %s", s.name)
	if !slices.Contains(strings.Fields(keys), key) {
		return "", false
	}
	file := filepath.Join(t.TempDir(), "value")
	out, err := s.c.Rados("-p", s.c.Pool, "getomapval", "rbdcsi.nodes", key, file)
	harness.Must(t, err, "rados getomapval %s on site %s: %s", key, s.name, out)
	v, err := os.ReadFile(file)
	harness.Must(t, err, "reading %s", file)
	return string(v), true
}

// nodeFenced are the messages of the volume's NodeFenced conditions on
// the site (ControllerGetVolumeHealth).
func (s *site) nodeFenced(t *testing.T, id string) []string {
	resp, err := s.cc.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: id, Secrets: s.secrets()})
	harness.Must(t, err, "ControllerGetVolumeHealth on site %s", s.name)
	var out []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		if h.GetReason() == "NodeFenced" {
			out = append(out, h.GetMessage())
		}
	}
	return out
}
