package nodereg

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Fence is what the controller blocklisted when it detached a volume from
// a node that still had it open: the node's clients of the image, until
// Expires, when Ceph drops the entries by itself.
type Fence struct {
	Addrs   []string // sorted
	Expires time.Time
}

func (f Fence) String() string {
	return strconv.FormatInt(f.Expires.Unix(), 10) + " " + strings.Join(f.Addrs, " ")
}

func parseFence(v string) (Fence, error) {
	fields := strings.Fields(v)
	if len(fields) < 2 {
		return Fence{}, fmt.Errorf("fence record %q: want an expiry and addresses", v)
	}
	sec, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return Fence{}, fmt.Errorf("fence record %q: %w", v, err)
	}
	addrs := fields[1:]
	slices.Sort(addrs)
	return Fence{Addrs: addrs, Expires: time.Unix(sec, 0)}, nil
}

func fenceKey(nodeID, volumeID string) string { return fencePrefix + nodeID + "/" + volumeID }

// AddFence records a fence of the volume on the node, joined with one
// already recorded (a detach retried after some of its clients were
// blocklisted): the addresses of both, the later expiry.
func (r *Registry) AddFence(ctx context.Context, nodeID, volumeID string, f Fence) error {
	key := fenceKey(nodeID, volumeID)
	if v, ok, err := r.store.GetOmap(ctx, r.pool, r.object, key); err != nil {
		return err
	} else if ok {
		if old, err := parseFence(v); err == nil {
			f.Addrs = append(f.Addrs, old.Addrs...)
			if old.Expires.After(f.Expires) {
				f.Expires = old.Expires
			}
		}
	}
	f.Addrs = slices.Compact(slices.Sorted(slices.Values(f.Addrs)))
	return r.store.SetOmap(ctx, r.pool, r.object, map[string]string{key: f.String()})
}

// Fences returns the node's fences by volume ID. A record that cannot be
// read is left out (DropExpiredFences removes it).
func (r *Registry) Fences(ctx context.Context, nodeID string) (map[string]Fence, error) {
	prefix := fenceKey(nodeID, "")
	kv, err := r.store.ListOmap(ctx, r.pool, r.object, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string]Fence{}
	for k, v := range kv {
		if f, err := parseFence(v); err == nil {
			out[strings.TrimPrefix(k, prefix)] = f
		}
	}
	return out, nil
}

// VolumeFences returns the fences of every node, by volume ID and then
// node ID, in one read of the registry (for health reports). A record that
// cannot be read is left out.
func (r *Registry) VolumeFences(ctx context.Context) (map[string]map[string]Fence, error) {
	kv, err := r.store.ListOmap(ctx, r.pool, r.object, fencePrefix)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]Fence{}
	for k, v := range kv {
		node, vol, ok := strings.Cut(strings.TrimPrefix(k, fencePrefix), "/")
		f, err := parseFence(v)
		if !ok || err != nil {
			continue
		}
		if out[vol] == nil {
			out[vol] = map[string]Fence{}
		}
		out[vol][node] = f
	}
	return out, nil
}

// DropExpiredFences removes the fence records of every node whose entries
// Ceph has dropped by itself, and malformed ones; it returns how many.
func (r *Registry) DropExpiredFences(ctx context.Context) (int, error) {
	kv, err := r.store.ListOmap(ctx, r.pool, r.object, fencePrefix)
	if err != nil {
		return 0, err
	}
	var stale []string
	for k, v := range kv {
		if f, err := parseFence(v); err != nil || !f.Expires.After(r.now()) {
			stale = append(stale, k)
		}
	}
	if len(stale) == 0 {
		return 0, nil
	}
	if err := r.store.RemoveOmapKeys(ctx, r.pool, r.object, stale...); err != nil {
		return 0, err
	}
	return len(stale), nil
}

// Unblocklister lifts blocklist entries (internal/rbd/ceph implements it).
type Unblocklister interface {
	Unblocklist(ctx context.Context, monHost string, cred cluster.Credentials, addr string) error
}

// Unfencer lifts one node's fences, with the registry's credentials (the
// node user's): the node calls it once it no longer maps the volume.
type Unfencer struct {
	reg    *Registry
	bl     Unblocklister
	nodeID string
}

// NewUnfencer returns the Unfencer of nodeID's fences.
func NewUnfencer(reg *Registry, bl Unblocklister, nodeID string) *Unfencer {
	return &Unfencer{reg: reg, bl: bl, nodeID: nodeID}
}

// Fenced tells whether the node has a fence record of the volume that has
// not expired.
func (u *Unfencer) Fenced(ctx context.Context, volumeID string) (bool, error) {
	fences, err := u.fences(ctx)
	if err != nil {
		return false, err
	}
	f, ok := fences[volumeID]
	return ok && f.Expires.After(u.reg.now()), nil
}

// fences are the node's fence records, by volume ID.
func (u *Unfencer) fences(ctx context.Context) (map[string]Fence, error) {
	fences, err := u.reg.Fences(ctx, u.nodeID)
	if err != nil {
		return nil, fmt.Errorf("reading the fences of node %s: %w", u.nodeID, u.reg.asNode(err))
	}
	return fences, nil
}

// Lift lifts the node's fence of the volume on the cluster at monHost (the
// volume's): it removes the blocklist entries no other fence of the node
// still holds, then the record, and returns the addresses it unblocked;
// fenced is false when there was no record, and nothing to do. krbd
// serves every mapping of a node with one client (unless mapped with
// noshare), so another volume fenced on this node may have the same
// address and still be mapped: its entry stays until that volume's own
// lift, or its expiry.
func (u *Unfencer) Lift(ctx context.Context, volumeID, monHost string) (lifted []string, fenced bool, err error) {
	fences, err := u.fences(ctx)
	if err != nil {
		return nil, false, err
	}
	f, ok := fences[volumeID]
	if !ok {
		return nil, false, nil
	}
	held := map[string]bool{}
	for vol, other := range fences {
		if vol != volumeID && other.Expires.After(u.reg.now()) {
			for _, a := range other.Addrs {
				held[a] = true
			}
		}
	}
	if f.Expires.After(u.reg.now()) { // else Ceph dropped the entries already
		for _, a := range f.Addrs {
			if held[a] {
				continue
			}
			if err := u.bl.Unblocklist(ctx, monHost, u.reg.pool.Cred, a); err != nil {
				return lifted, true, rbd.RefusedAt(u.reg.pool.Cred, cluster.CapNodeMon, err)
			}
			lifted = append(lifted, a)
		}
	}
	if err := u.reg.store.RemoveOmapKeys(ctx, u.reg.pool, u.reg.object, fenceKey(u.nodeID, volumeID)); err != nil {
		return lifted, true, fmt.Errorf("removing the fence record of %s on node %s: %w", volumeID, u.nodeID, u.reg.asNode(err))
	}
	return lifted, true, nil
}
