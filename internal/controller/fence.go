package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// fenceSettle bounds the wait for Ceph to list a fenced client on the
// image no more: its watch goes as soon as the OSD has the map with the
// entry, which Blocklist waited for, and its lock was broken, so this is
// a margin, not a schedule.
const fenceSettle = 3 * time.Second

// fence blocklists the clients that still have the volume's image open
// while it is detached from node, which held it as a single-node writer
// (attach.FencedAtDetach). Kubernetes detaches a volume only after the
// node unstaged it, or when it gives up on the node (a node out of service,
// or one that did not unmount within the attach-detach timeout): then
// the node may still map it, and its late writes would corrupt the
// filesystem of the node the volume moves to. Any client other than this
// controller's own connections is taken for such a mapping: a watcher (a
// node that still reaches the cluster), or the holder of the exclusive
// lock (a node cut off for longer than the OSDs keep its watch, which
// would write again when it is back); on a mirrored image, where the
// node's address is known, only the watchers at it and the lock holder
// (fenceable). The fence is recorded before the blocklist entries are
// added, so a crash between them leaves a record the node can lift; its
// failure keeps the attachment (the caller removes the record only after
// this returns nil).
func (c *Controller) fence(ctx context.Context, pool rbd.Pool, vol volid.Volume, id, node string) error {
	clients, err := c.backend.Clients(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotFound) {
		return nil
	}
	if err != nil {
		return cephStatus(fmt.Errorf("reading which clients have volume %s open before detaching it from node %s: %w", id, node, err))
	}
	clients = slices.DeleteFunc(clients, func(cl rbd.Client) bool { return cl.Own })
	if len(clients) == 0 {
		return nil // the node unmapped it: a normal detach
	}
	var addrs, locking []string
	for _, cl := range c.fenceable(ctx, pool, vol, id, node, clients) {
		addrs = append(addrs, cl.Addr)
		if cl.Lock {
			locking = append(locking, cl.Addr)
		}
	}
	if len(addrs) == 0 {
		return nil // only the peer site's rbd-mirror has it open
	}
	slices.Sort(addrs)
	expiry := c.opts.FenceExpiry
	f := nodereg.Fence{Addrs: addrs, Expires: time.Now().Add(expiry)}
	if err := c.nodes.AddFence(ctx, node, id, f); err != nil {
		return c.fenceFailed(id, node, addrs, fmt.Errorf("recording the fence in the node registry: %w", err))
	}
	for _, a := range addrs {
		if err := c.backend.Blocklist(ctx, pool.MonHost, pool.Cred, a, expiry); err != nil {
			return c.fenceFailed(id, node, addrs, err)
		}
	}
	// Only once it is barred: a live holder would take the lock again.
	// Left to the next writer (the new node, or this detach's own
	// metadata write), the break would blocklist the holder once more,
	// for Ceph's default hour in place of --fence-expiry.
	for _, a := range locking {
		if err := c.backend.BreakLock(ctx, pool, vol.Image, a); err != nil {
			return c.fenceFailed(id, node, addrs, err)
		}
	}
	if err := c.fenceSettled(ctx, pool, vol, addrs); err != nil {
		return c.fenceFailed(id, node, addrs, err)
	}
	c.opts.Upkeep.Fenced(nil)
	klog.V(1).InfoS("fenced a node that still had a volume open as it was detached: its clients are blocklisted until it unstages the volume, or until they expire",
		"volumeID", id, "node", node, "clients", addrs, "expires", f.Expires.UTC().Format(time.RFC3339))
	return nil
}

// fenceSettled waits until Ceph lists none of the blocklisted clients as a
// watcher or lock holder of the image any more: proof that the OSDs
// enforce the blocklist before the volume may be attached elsewhere.
func (c *Controller) fenceSettled(ctx context.Context, pool rbd.Pool, vol volid.Volume, addrs []string) error {
	deadline := time.Now().Add(fenceSettle)
	for {
		clients, err := c.backend.Clients(ctx, pool, vol.Image)
		if err != nil {
			return fmt.Errorf("reading the image's clients after blocklisting: %w", err)
		}
		left := slices.ContainsFunc(clients, func(cl rbd.Client) bool { return slices.Contains(addrs, cl.Addr) })
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the clients are blocklisted, but Ceph still lists them on the image after %v", rbd.ErrUnavailable, fenceSettle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fenceFailed counts a fence that did not happen and answers the detach:
// Unavailable when Ceph did not answer (the attacher retries), Internal
// otherwise, both saying that the volume stays attached.
func (c *Controller) fenceFailed(id, node string, addrs []string, err error) error {
	c.opts.Upkeep.Fenced(err)
	code := codes.Internal
	if errors.Is(err, rbd.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		code = codes.Unavailable
	}
	// A refusal names the user and the cap itself (rbd.RefusedAt).
	return status.Errorf(code, "volume %s stays attached to node %s: the node still has it open (clients %s) and fencing them failed: %v",
		id, node, strings.Join(addrs, ", "), err)
}

// fenceable narrows the clients to fence to the node's where they can be
// told apart. While a peer site replays a mirrored image, its rbd-mirror
// watches the primary (as the peer's user) from the address of the peer's
// host: no mapping of the node, and a fence would blocklist it and leave a
// record that no node lifts. The node records at each stage the IP its
// Ceph clients reach the cluster from (internal/nodereg), and every client
// of its mappings learns that IP from its monitor session: the watchers
// at it are the node's. The holder of the exclusive lock is fenced
// whatever its address, as only a writer takes it. Anything unknown (an
// image not mirrored, no address recorded, a read that fails) fences
// every client: a fence too wide costs the peer's rbd-mirror its client
// until it reconnects, one too narrow lets a stale mapping write.
func (c *Controller) fenceable(ctx context.Context, pool rbd.Pool, vol volid.Volume, id, node string, clients []rbd.Client) []rbd.Client {
	ip, mirrored, err := c.mirroredNodeIP(ctx, pool, vol, node)
	switch {
	case err != nil:
		klog.ErrorS(err, "cannot tell the node's clients of a mirrored image from the peer site's rbd-mirror: fencing every client", "volumeID", id, "node", node)
		return clients
	case !mirrored:
		return clients
	case !ip.IsValid():
		klog.V(1).InfoS("the node recorded no client address for the volume's cluster: fencing every client of the mirrored image, the peer site's rbd-mirror too", "volumeID", id, "node", node)
		return clients
	}
	var fence []rbd.Client
	var skipped []string
	for _, cl := range clients {
		// An address that does not parse is fenced: it might be the node's.
		if at, ok := clientIP(cl.Addr); cl.Lock || !ok || at == ip {
			fence = append(fence, cl)
		} else {
			skipped = append(skipped, cl.Addr)
		}
	}
	if len(skipped) > 0 {
		klog.V(1).InfoS("not fencing the watchers at other addresses of a mirrored image: taken for the peer site's rbd-mirror",
			"volumeID", id, "node", node, "nodeAddress", ip, "skipped", skipped)
	}
	return fence
}

// mirroredNodeIP reports whether the image is mirrored and, if it is, the
// address the node recorded for the volume's cluster (invalid if none).
// The key is the cluster map entry's own clusterID, which the node
// resolves the volume ID to as well: on a mirror site, a volume ID may
// carry the peer's.
func (c *Controller) mirroredNodeIP(ctx context.Context, pool rbd.Pool, vol volid.Volume, node string) (netip.Addr, bool, error) {
	mi, err := c.backend.MirrorInfo(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotMirrored) || (err == nil && !mi.Enabled()) {
		return netip.Addr{}, false, nil
	}
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("reading the mirroring of image %s: %w", vol.Image, err)
	}
	entry, err := c.clusters.Lookup(vol.ClusterID)
	if err != nil {
		return netip.Addr{}, true, err
	}
	ip, ok, err := c.nodes.ClientIP(ctx, node, entry.ClusterID)
	if err != nil {
		return netip.Addr{}, true, fmt.Errorf("reading the node's client address in the node registry: %w", err)
	}
	if !ok {
		return netip.Addr{}, true, nil
	}
	return ip, true, nil
}

// clientIP is the IP of a client's address ("ip:port/nonce", as Clients
// gives it).
func clientIP(addr string) (netip.Addr, bool) {
	hostPort, _, ok := strings.Cut(addr, "/")
	if !ok {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(hostPort)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
