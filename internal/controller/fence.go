package controller

import (
	"context"
	"errors"
	"fmt"
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
// would write again when it is back). The fence is recorded before the
// blocklist entries are added, so a crash between them leaves a record
// the node can lift; its failure keeps the attachment (the caller removes
// the record only after this returns nil).
func (c *Controller) fence(ctx context.Context, pool rbd.Pool, vol volid.Volume, id, node string) error {
	clients, err := c.backend.Clients(ctx, pool, vol.Image)
	if errors.Is(err, rbd.ErrNotFound) {
		return nil
	}
	if err != nil {
		return cephStatus(fmt.Errorf("reading which clients have volume %s open before detaching it from node %s: %w", id, node, err))
	}
	var addrs, locking []string
	for _, cl := range clients {
		if cl.Own {
			continue
		}
		addrs = append(addrs, cl.Addr)
		if cl.Lock {
			locking = append(locking, cl.Addr)
		}
	}
	if len(addrs) == 0 {
		return nil // the node unmapped it: a normal detach
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
