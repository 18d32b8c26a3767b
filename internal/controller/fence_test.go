package controller_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

// fenceEnv is a controller with a node registry (on the fake's omap) in
// which node-a and node-b beat.
type fenceEnv struct {
	*env
	c   *ctrl
	reg *nodereg.Registry
	up  *upkeep
}

func newFenceEnv(t *testing.T, o controller.Options) *fenceEnv { return fenceEnvOn(t, newEnv(t), o) }

// fenceEnvOn is newFenceEnv on an env made beforehand (its wrap set).
func fenceEnvOn(t *testing.T, e *env, o controller.Options) *fenceEnv {
	reg := nodereg.New(e.ceph, e.pool, "", time.Minute)
	for _, n := range []string{"node-a", "node-b"} {
		must(t, reg.Beat(ctx(t), nodereg.Node{ID: n}), "heartbeat of "+n)
	}
	up := &upkeep{}
	o.Nodes, o.Upkeep = reg, up
	return &fenceEnv{env: e, c: e.start("", o), reg: reg, up: up}
}

func accessCap(mode csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}
	}
	return c
}

func (f *fenceEnv) publish(t *testing.T, vol, node string, c *csi.VolumeCapability, ro bool) {
	t.Helper()
	_, err := f.c.c.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: node, VolumeCapability: c, Readonly: ro, Secrets: secrets()})
	must(t, err, "publish to "+node)
}

func (f *fenceEnv) unpublish(t *testing.T, vol, node string) error {
	_, err := f.c.c.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node, Secrets: secrets()})
	return err
}

// mapOn opens the volume's image and writes to it, as a node's mapping
// does: its client watches the image and holds the exclusive lock.
func (f *fenceEnv) mapOn(t *testing.T, vol string) *fake.Mapping {
	t.Helper()
	m, err := f.ceph.Map(f.pool, imageOf(t, vol))
	must(t, err, "Map")
	t.Cleanup(m.Unmap)
	return m
}

func (f *fenceEnv) clients(t *testing.T, vol string) []rbd.Client {
	t.Helper()
	cs, err := f.ceph.Clients(ctx(t), f.pool, imageOf(t, vol))
	must(t, err, "Clients")
	return cs
}

func (f *fenceEnv) attachedTo(t *testing.T, vol string) []string {
	t.Helper()
	info, err := f.ceph.Stat(ctx(t), f.pool, imageOf(t, vol))
	must(t, err, "Stat")
	return attach.Nodes(info.Metadata, info.ID)
}

// A detach from a node that still maps a single-node writer's image (a
// force detach) blocklists that client for the expiry, records the fence
// for the node to lift, and only then removes the attachment; the next
// node can attach. A node cut off from the cluster for longer than the
// OSDs keep its watch is found by the exclusive lock it still holds.
func TestForceDetachFencesTheMapping(t *testing.T) {
	for _, tc := range []struct {
		mode   csi.VolumeCapability_AccessMode_Mode
		cutOff bool
	}{
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, false},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, false},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, true},
	} {
		mode := tc.mode
		name := mode.String()
		if tc.cutOff {
			name += "/cut-off"
		}
		t.Run(name, func(t *testing.T) {
			f := newFenceEnv(t, controller.Options{FenceExpiry: 2 * time.Hour})
			v := f.c.mustCreate(t, "vol", nil)
			f.publish(t, v, "node-a", accessCap(mode, false), false)
			m := f.mapOn(t, v)
			if tc.cutOff {
				m.CutOff()
			}
			addr := m.Addr
			start := time.Now()
			must(t, f.unpublish(t, v, "node-a"), "force detach")

			exp, ok := f.ceph.Blocklisted()[addr]
			if !ok || exp.Before(start.Add(2*time.Hour)) || exp.After(time.Now().Add(2*time.Hour)) {
				t.Fatalf("blocklist %v: want %s until two hours from now", f.ceph.Blocklisted(), addr)
			}
			fences, err := f.reg.Fences(ctx(t), "node-a")
			must(t, err, "Fences")
			if got := fences[v]; !slices.Equal(got.Addrs, []string{addr}) || got.Expires.Sub(exp).Abs() > time.Second {
				t.Fatalf("fence record %+v, want %s until %v", fences, addr, exp)
			}
			if got := f.attachedTo(t, v); len(got) != 0 {
				t.Fatalf("still attached to %v", got)
			}
			if cs := f.clients(t, v); len(cs) != 0 {
				t.Fatalf("the fenced client still watches the image or holds its lock: %+v", cs)
			}
			if len(f.up.fences) != 1 || f.up.fences[0] != nil {
				t.Fatalf("fences counted: %v", f.up.fences)
			}
			f.publish(t, v, "node-b", accessCap(mode, false), false)
			must(t, f.unpublish(t, v, "node-a"), "repeated detach from node-a")
		})
	}
}

// A normal detach comes after the node unstaged: no client is left, and
// nothing is blocklisted. The controller's own watch (a metadata write, a
// flatten) is never taken for the node's.
func TestDetachWithoutMappingFencesNothing(t *testing.T) {
	f := newFenceEnv(t, controller.Options{})
	v := f.c.mustCreate(t, "vol", nil)
	rwo := accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	f.publish(t, v, "node-a", rwo, false)
	must(t, f.unpublish(t, v, "node-a"), "normal detach")

	f.publish(t, v, "node-a", rwo, false)
	unwatch, err := f.c.ceph.WatchOwn(f.pool, imageOf(t, v))
	must(t, err, "WatchOwn")
	defer unwatch()
	must(t, f.unpublish(t, v, "node-a"), "detach while the controller itself has the image open")

	f.fencedNothing(t)
}

// Attachment records name the image they were written on: rbd-mirror
// copies a volume's metadata to the peer site's copy (another image ID),
// and the records of the peer's nodes that came that way attach nothing
// here. They neither block a node of this site, nor show as published,
// nor are they fenced or removed by a detach here; the record written
// here names this image.
func TestRecordsOfAnotherImageAttachNothing(t *testing.T) {
	f := newFenceEnv(t, controller.Options{})
	v := f.c.mustCreate(t, "vol", nil)
	rwo := accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	peers := attach.Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}.Value("0a1b2c3d")
	must(t, f.ceph.SetMetadata(ctx(t), f.pool, imageOf(t, v), map[string]string{attach.MetaPrefix + "node-a": peers}), "the peer's record")

	f.publish(t, v, "node-b", rwo, false)
	if got := f.attachedTo(t, v); len(got) != 1 || got[0] != "node-b" {
		t.Fatalf("attached to %v, want [node-b]", got)
	}
	info, err := f.ceph.Stat(ctx(t), f.pool, imageOf(t, v))
	must(t, err, "Stat")
	if got, want := info.Metadata[attach.MetaPrefix+"node-b"], "rw:SINGLE_NODE_WRITER@"+info.ID; info.ID == "" || got != want {
		t.Fatalf("the record written here is %q, want %q", got, want)
	}
	must(t, f.unpublish(t, v, "node-b"), "detach node-b")
	info, err = f.ceph.Stat(ctx(t), f.pool, imageOf(t, v))
	must(t, err, "Stat")
	if info.Metadata[attach.MetaPrefix+"node-a"] != peers {
		t.Fatal("a detach here changed the peer's record")
	}
	// node-a is a node of this site too, named as the peer's node is:
	// its record here replaces the peer's, and goes with its detach.
	f.publish(t, v, "node-a", rwo, false)
	if got := f.attachedTo(t, v); len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("attached to %v, want [node-a]", got)
	}
	must(t, f.unpublish(t, v, "node-a"), "detach node-a")
	if got := f.attachedTo(t, v); len(got) != 0 {
		t.Fatalf("attached to %v after the detaches", got)
	}
	if bl := f.ceph.Blocklisted(); len(bl) != 0 {
		t.Fatalf("blocklisted %v", bl)
	}
}

// Readers write nothing, and the nodes of multi-node modes share the image
// by design: their detach fences no one, whoever still has it open.
func TestReadersAndMultiNodeAreNotFenced(t *testing.T) {
	f := newFenceEnv(t, controller.Options{})
	for i, tc := range []struct {
		mode  csi.VolumeCapability_AccessMode_Mode
		block bool
		ro    bool
	}{
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, true},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, false, true},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, false, true},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, true, false},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, true, false},
	} {
		v := f.c.mustCreate(t, "vol-"+string(rune('a'+i)), nil)
		f.publish(t, v, "node-a", accessCap(tc.mode, tc.block), tc.ro)
		f.mapOn(t, v)
		must(t, f.unpublish(t, v, "node-a"), "detach "+tc.mode.String())
		if cs := f.clients(t, v); len(cs) != 1 || !cs[0].Watch || !cs[0].Lock {
			t.Fatalf("%s: the node's client lost its watch or lock: %+v", tc.mode, cs)
		}
	}
	f.fencedNothing(t)
}

// A fence that fails keeps the attachment: Unavailable while Ceph does not
// answer, Internal for any other cause, never a silent success. The retry
// that succeeds fences the client the failed one recorded.
func TestFailedFenceKeepsTheAttachment(t *testing.T) {
	f := newFenceEnv(t, controller.Options{})
	v := f.c.mustCreate(t, "vol", nil)
	f.publish(t, v, "node-a", accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), false)
	addr := f.mapOn(t, v).Addr

	f.ceph.FailBlocklist(rbd.ErrUnavailable)
	wantCode(t, f.unpublish(t, v, "node-a"), codes.Unavailable, "detach while the monitor does not answer")
	f.ceph.FailBlocklist(rbd.ErrPermission)
	err := f.unpublish(t, v, "node-a")
	wantCode(t, err, codes.Internal, "detach with a user that may not blocklist")
	for _, want := range []string{"node-a", addr, "stays attached", "profile rbd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if got := f.attachedTo(t, v); !slices.Equal(got, []string{"node-a"}) {
		t.Fatalf("attached to %v after failed fences, want node-a still", got)
	}
	if n := len(f.up.fences); n != 2 || f.up.fences[0] == nil || f.up.fences[1] == nil {
		t.Fatalf("fences counted: %v", f.up.fences)
	}
	if len(f.ceph.Blocklisted()) != 0 {
		t.Fatal("a failed fence blocklisted")
	}
	if cs := f.clients(t, v); len(cs) != 1 || !cs[0].Lock {
		t.Fatalf("clients %+v: the lock of a client that is not barred was broken", cs)
	}
	if fences, _ := f.reg.Fences(ctx(t), "node-a"); !slices.Equal(fences[v].Addrs, []string{addr}) {
		t.Fatalf("fence records %v: the intent is recorded before the blocklist", fences)
	}

	f.ceph.FailBlocklist(nil)
	must(t, f.unpublish(t, v, "node-a"), "detach once Ceph blocklists")
	if _, ok := f.ceph.Blocklisted()[addr]; !ok {
		t.Fatalf("blocklist %v lacks %s", f.ceph.Blocklisted(), addr)
	}
	if got := f.attachedTo(t, v); len(got) != 0 {
		t.Fatalf("still attached to %v", got)
	}
}

// The periodic sweep drops fence records whose entries Ceph has dropped by
// itself, of nodes that never came back to lift them, and counts them.
func TestSweepDropsExpiredFences(t *testing.T) {
	f := newFenceEnv(t, controller.Options{Credentials: ownCreds(), SweepInterval: 20 * time.Millisecond})
	past := nodereg.Fence{Addrs: []string{"127.0.0.1:0/99"}, Expires: time.Now().Add(-time.Minute)}
	live := nodereg.Fence{Addrs: []string{"127.0.0.1:0/98"}, Expires: time.Now().Add(time.Hour)}
	must(t, f.reg.AddFence(ctx(t), "node-a", "v1:c:p:old", past), "AddFence")
	must(t, f.reg.AddFence(ctx(t), "node-b", "v1:c:p:new", live), "AddFence")
	waitFor(t, "the expired record dropped", func() bool { return f.up.count("expired-fence") == 1 })
	a, _ := f.reg.Fences(ctx(t), "node-a")
	b, _ := f.reg.Fences(ctx(t), "node-b")
	if len(a) != 0 || !maps.EqualFunc(b, map[string]nodereg.Fence{"v1:c:p:new": live}, func(x, y nodereg.Fence) bool { return slices.Equal(x.Addrs, y.Addrs) }) {
		t.Fatalf("after the sweep: node-a %v, node-b %v", a, b)
	}
}

// fencedNothing: no blocklist entry, no fence record of node-a, no fence
// counted.
func (f *fenceEnv) fencedNothing(t *testing.T) {
	t.Helper()
	if bl := f.ceph.Blocklisted(); len(bl) != 0 {
		t.Fatalf("blocklisted %v", bl)
	}
	if fences, _ := f.reg.Fences(ctx(t), "node-a"); len(fences) != 0 {
		t.Fatalf("fence records %v", fences)
	}
	if len(f.up.fences) != 0 {
		t.Fatalf("fences counted: %v", f.up.fences)
	}
}
