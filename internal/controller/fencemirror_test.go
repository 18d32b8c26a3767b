package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Addresses of the hosts in these tests: the fake's own clients (the
// controller, and a node on the same host) are at 127.0.0.1.
var (
	nodeIP = netip.MustParseAddr("127.0.0.1")
	peerIP = netip.MustParseAddr("127.0.0.3") // the peer site's rbd-mirror
	farIP  = netip.MustParseAddr("10.0.0.9")  // another host
)

// newMirrorFenceEnv is a fenceEnv whose pool mirrors image by image.
func newMirrorFenceEnv(t *testing.T, wrap func(rbd.Backend) rbd.Backend) *fenceEnv {
	e := newEnv(t)
	e.wrap = wrap
	e.ceph.SetPoolMirrorMode(poolName, "image")
	return fenceEnvOn(t, e, controller.Options{})
}

// mirroredVolume is a volume whose image is mirrored, attached to node-a
// as a single-node writer, and watched by the peer site's rbd-mirror: it
// returns the volume ID and that watcher's address.
func (f *fenceEnv) mirroredVolume(t *testing.T, name string) (string, string) {
	t.Helper()
	v := f.c.mustCreate(t, name, nil)
	must(t, f.ceph.EnableMirroring(ctx(t), f.pool, imageOf(t, v)), "EnableMirroring")
	f.publish(t, v, "node-a", accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), false)
	unwatch, peer, err := f.ceph.WatchFrom(f.pool, imageOf(t, v), peerIP)
	must(t, err, "the peer's rbd-mirror watches")
	t.Cleanup(unwatch)
	return v, peer
}

// fencedAddrs are the blocklisted addresses, sorted.
func (f *fenceEnv) fencedAddrs() []string {
	var out []string
	for a := range f.ceph.Blocklisted() {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// watched reports whether addr still watches the volume's image.
func (f *fenceEnv) watched(t *testing.T, v, addr string) bool {
	return slices.ContainsFunc(f.clients(t, v), func(c rbd.Client) bool { return c.Addr == addr && c.Watch })
}

// With the node's address in the registry, the detach of a mirrored
// volume fences the node's clients (its watchers, at that address) and the
// holder of the exclusive lock wherever it is, and never the peer site's
// rbd-mirror watching from another address; the fence record names only
// those fenced. A volume ID carrying the peer's clusterID finds the
// address the node recorded under this cluster's.
func TestMirroredDetachSparesThePeersMirror(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open has the node (and others) open the image; it returns who
		// must be fenced.
		open  func(t *testing.T, f *fenceEnv, v string) []string
		peerI bool // the detach uses the ID with the peer's clusterID
	}{
		{name: "node maps", open: func(t *testing.T, f *fenceEnv, v string) []string {
			return []string{f.mapOn(t, v).Addr}
		}},
		{name: "node maps, ID of the peer", peerI: true, open: func(t *testing.T, f *fenceEnv, v string) []string {
			return []string{f.mapOn(t, v).Addr}
		}},
		{name: "lock held from another host", open: func(t *testing.T, f *fenceEnv, v string) []string {
			unwatch, err := f.ceph.Watch(f.pool, imageOf(t, v))
			must(t, err, "the node watches")
			t.Cleanup(unwatch)
			node := f.clients(t, v)[1].Addr
			m, err := f.ceph.MapFrom(f.pool, imageOf(t, v), farIP)
			must(t, err, "MapFrom")
			t.Cleanup(m.Unmap)
			m.CutOff() // its watch timed out; it holds the lock
			return []string{node, m.Addr}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMirrorFenceEnv(t, nil)
			v, peer := f.mirroredVolume(t, "vol")
			want := tc.open(t, f, v)
			slices.Sort(want)
			must(t, f.reg.SetClientIP(ctx(t), "node-a", clusterID, nodeIP), "the node records its address")
			id := v
			if tc.peerI {
				id = strings.Replace(v, ":"+clusterID+":", ":"+peerClusterID+":", 1)
			}
			must(t, f.unpublish(t, id, "node-a"), "detach")

			if got := f.fencedAddrs(); !slices.Equal(got, want) {
				t.Fatalf("blocklisted %v, want %v (the peer's rbd-mirror is %s)", got, want, peer)
			}
			fences, err := f.reg.Fences(ctx(t), "node-a")
			must(t, err, "Fences")
			if got := fences[id].Addrs; !slices.Equal(got, want) {
				t.Fatalf("fence record %v, want %v", fences, want)
			}
			if !f.watched(t, v, peer) {
				t.Fatalf("the peer's rbd-mirror lost its watch: %+v", f.clients(t, v))
			}
			if cs := f.clients(t, v); len(cs) != 1 || cs[0].Lock {
				t.Fatalf("clients after the fence %+v, want the peer's watch alone", cs)
			}
			if got := f.attachedTo(t, v); len(got) != 0 {
				t.Fatalf("still attached to %v", got)
			}
		})
	}
}

// A normal detach of a mirrored volume (the node unmapped it) finds only
// the peer's rbd-mirror: nothing is blocklisted, no fence recorded or
// counted, and the attachment goes.
func TestMirroredNormalDetachFencesNothing(t *testing.T) {
	f := newMirrorFenceEnv(t, nil)
	v, peer := f.mirroredVolume(t, "vol")
	must(t, f.reg.SetClientIP(ctx(t), "node-a", clusterID, nodeIP), "the node records its address")
	must(t, f.unpublish(t, v, "node-a"), "detach")
	f.fencedNothing(t)
	if !f.watched(t, v, peer) {
		t.Fatal("the peer's rbd-mirror lost its watch")
	}
	if got := f.attachedTo(t, v); len(got) != 0 {
		t.Fatalf("still attached to %v", got)
	}
}

// Where the node's clients cannot be told apart, every client is fenced,
// the peer's rbd-mirror too, as it was before nodes recorded addresses: a
// node that recorded none (a plugin that predates it, a record that
// failed), one recorded for another cluster only or by another node, a
// registry or mirror read that fails, and an image that is not mirrored
// (whose other clients are no rbd-mirror).
func TestDetachFencesEveryClientWhenUnsure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		record   func(t *testing.T, f *fenceEnv)
		wrap     func(rbd.Backend) rbd.Backend
		mirrored bool
	}{
		{name: "no address recorded", mirrored: true},
		{name: "address of another cluster", mirrored: true, record: func(t *testing.T, f *fenceEnv) {
			must(t, f.reg.SetClientIP(ctx(t), "node-a", "other-cluster", nodeIP), "SetClientIP")
		}},
		{name: "address of another node", mirrored: true, record: func(t *testing.T, f *fenceEnv) {
			must(t, f.reg.SetClientIP(ctx(t), "node-b", clusterID, nodeIP), "SetClientIP")
		}},
		{name: "malformed address", mirrored: true, record: func(t *testing.T, f *fenceEnv) {
			must(t, f.ceph.SetOmap(ctx(t), f.pool, "rbdcsi.nodes", map[string]string{"addr/node-a/" + clusterID: "x"}), "SetOmap")
		}},
		{name: "mirror info unreadable", mirrored: true, record: recordNodeIP, wrap: func(b rbd.Backend) rbd.Backend {
			return mirrorInfoFailer{b}
		}},
		{name: "not mirrored", record: recordNodeIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMirrorFenceEnv(t, tc.wrap)
			v := f.c.mustCreate(t, "vol", nil)
			if tc.mirrored {
				must(t, f.ceph.EnableMirroring(ctx(t), f.pool, imageOf(t, v)), "EnableMirroring")
			}
			f.publish(t, v, "node-a", accessCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), false)
			unwatch, other, err := f.ceph.WatchFrom(f.pool, imageOf(t, v), peerIP)
			must(t, err, "WatchFrom")
			t.Cleanup(unwatch)
			node := f.mapOn(t, v).Addr
			if tc.record != nil {
				tc.record(t, f)
			}
			must(t, f.unpublish(t, v, "node-a"), "detach")
			want := []string{node, other}
			slices.Sort(want)
			if got := f.fencedAddrs(); !slices.Equal(got, want) {
				t.Fatalf("blocklisted %v, want every client %v", got, want)
			}
			if cs := f.clients(t, v); len(cs) != 0 {
				t.Fatalf("clients left after the fence: %+v", cs)
			}
		})
	}
}

func recordNodeIP(t *testing.T, f *fenceEnv) {
	must(t, f.reg.SetClientIP(ctx(t), "node-a", clusterID, nodeIP), "SetClientIP")
}

// mirrorInfoFailer is a backend whose MirrorInfo does not answer.
type mirrorInfoFailer struct{ rbd.Backend }

func (mirrorInfoFailer) MirrorInfo(context.Context, rbd.Pool, string) (rbd.MirrorInfo, error) {
	return rbd.MirrorInfo{}, fmt.Errorf("%w: the monitors do not answer", rbd.ErrUnavailable)
}
