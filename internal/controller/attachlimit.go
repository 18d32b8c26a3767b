package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// reserveSlot indexes a new attachment of the volume to the node, after
// checking the node's volume limit (--max-volumes-per-node, carried by its
// heartbeat). The caller writes the attachment record before it calls the
// returned release: until then no other publish to the node can count,
// or prune, the new entry.
func (c *Controller) reserveSlot(ctx context.Context, n nodereg.Node, volumeID string) (func(), error) {
	release, err := c.waitLock(ctx, "node/"+n.ID)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	if n.MaxVolumes > 0 {
		ids, err := c.nodes.Attachments(ctx, n.ID)
		if err != nil {
			return nil, cephStatus(fmt.Errorf("reading the attachments of node %s: %w", n.ID, err))
		}
		if int64(len(ids)) >= n.MaxVolumes && !slices.Contains(ids, volumeID) {
			ids = c.pruneStale(ctx, n.ID, ids)
		}
		if int64(len(ids)) >= n.MaxVolumes && !slices.Contains(ids, volumeID) {
			return nil, status.Errorf(codes.ResourceExhausted, "node %s has %d volumes attached, the most its plugin allows (--max-volumes-per-node %d); detach one first", n.ID, len(ids), n.MaxVolumes)
		}
	}
	if err := c.nodes.AddAttachment(ctx, n.ID, volumeID); err != nil {
		return nil, cephStatus(fmt.Errorf("indexing the attachment of %s to node %s: %w", volumeID, n.ID, err))
	}
	ok = true
	return release, nil
}

// pruneStale drops index entries whose volume no longer carries an
// attachment record for the node (a crash between the two writes), and
// returns the entries that stand. An entry that cannot be checked stands.
func (c *Controller) pruneStale(ctx context.Context, node string, ids []string) []string {
	var kept []string
	for _, id := range ids {
		if c.attachedTo(ctx, id, node) {
			kept = append(kept, id)
			continue
		}
		if err := c.nodes.RemoveAttachment(ctx, node, id); err != nil {
			kept = append(kept, id)
			continue
		}
		klog.V(2).InfoS("dropped a stale attachment index entry", "volumeID", id, "node", node)
	}
	return kept
}

// attachedTo reports whether the volume has an attachment record for the
// node, or cannot be read (then it counts as attached).
func (c *Controller) attachedTo(ctx context.Context, id, node string) bool {
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return false
	}
	pool, err := c.pool(vol.ClusterID, vol.Pool, nil)
	if err != nil {
		return true
	}
	info, err := c.backend.Stat(ctx, pool, vol.Image)
	if err != nil {
		return !errors.Is(err, rbd.ErrNotFound)
	}
	_, ok := attach.Records(info.Metadata, info.ID)[node]
	return ok
}

// unindex drops the volume from the attachment index of the nodes.
func (c *Controller) unindex(ctx context.Context, volumeID string, nodes []string) error {
	for _, n := range nodes {
		if !nodereg.ValidNodeID(n) {
			continue
		}
		if err := c.nodes.RemoveAttachment(ctx, n, volumeID); err != nil {
			return cephStatus(fmt.Errorf("removing the attachment of %s to node %s from the index: %w", volumeID, n, err))
		}
	}
	return nil
}
