package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// An nbd volume's rbd-nbd dies with the node plugin's container; the
// kernel keeps the device, its mounts and its I/O waiting for a new one
// (mapper.Reattacher). The plugin keeps no key, so it re-attaches at the
// next call that brings one: a repeated NodeStageVolume, or the
// NodePublishVolume kubelet repeats every minute or two for a driver with
// requiresRepublish, with the StorageClass's node-publish secret.

// nbdCookie names a volume's nbd mapping. Derived from the volume ID, it
// needs no record, and no other volume's daemon can take the device.
func nbdCookie(volumeID string) string {
	sum := sha256.Sum256([]byte("rbdcsi nbd cookie " + volumeID))
	return hex.EncodeToString(sum[:16])
}

// healSource is what a call offers for a re-attach: its secrets and the
// volume context (the map options).
type healSource struct {
	secrets map[string]string
	volCtx  map[string]string
	call    string // for the message when the secrets are missing
}

// healOrphan re-attaches the device of a staged volume whose mapping
// daemon is gone, and reports whether it did. A volume that is not such an
// orphan is left alone (false, nil).
func (n *Node) healOrphan(ctx context.Context, rec *record, m mapper.Mapper, src healSource) (bool, error) {
	r, ok := m.(mapper.Reattacher)
	if !ok || rec.Device == "" {
		return false, nil
	}
	orphaned, err := r.Orphaned(ctx, rec.Device)
	if err != nil || !orphaned {
		return false, err
	}
	if len(src.secrets) == 0 && n.cred == nil {
		return false, status.Errorf(codes.FailedPrecondition, "volume %s: the rbd-nbd daemon of %s is gone (node plugin restarted?) and %s brought no secret to re-attach it with; "+
			"give the node plugin a Ceph user of its own (--node-secret-dir), or the StorageClass a node-publish secret (csi.storage.k8s.io/node-publish-secret-name and -namespace); with the CSIDriver's requiresRepublish: true kubelet's next republish heals it",
			rec.VolumeID, rec.Device, src.call)
	}
	cred, err := n.callCredentials(src.secrets)
	if err != nil {
		return false, err
	}
	cl, err := n.clusters.Lookup(rec.Image.ClusterID)
	if err != nil {
		return false, status.Errorf(codes.NotFound, "volume %s: %v (this node's cluster map does not know it)", rec.VolumeID, err)
	}
	vol, err := decodeID(rec.VolumeID)
	if err != nil {
		return false, err
	}
	params, err := volumeParams(vol, src.volCtx)
	if err != nil {
		return false, status.Error(codes.InvalidArgument, err.Error())
	}
	opts, err := config.OptionsFor(config.ParamMapOptions, params.MapOptions, rec.Mounter)
	if err != nil {
		return false, status.Error(codes.InvalidArgument, err.Error())
	}
	// As a stage would: a single-node volume whose attachment moved to
	// another node while this one had no daemon must not start writing
	// from here again.
	if err := n.checkAttached(ctx, vol, cl, cred, rec.Cap.AccessMode); err != nil {
		return false, err
	}
	klog.InfoS("re-attaching an nbd volume whose daemon is gone", "volumeID", rec.VolumeID, "device", rec.Device)
	err = r.Reattach(ctx, mapper.MapRequest{
		Image: rec.Image, MonHost: cl.MonHost(), Cred: cred, Options: opts,
		ReadOnly: rec.Cap.readerOnly(), Cookie: nbdCookie(rec.VolumeID),
	}, rec.Device)
	if err != nil {
		return false, statusFor(fmt.Errorf("volume %s: %w", rec.VolumeID, err))
	}
	return true, nil
}

// intactOrHealed is stageIntact, after a re-attach where the mapping lost
// its daemon.
func (n *Node) intactOrHealed(ctx context.Context, rec *record, m mapper.Mapper, src healSource) (bool, error) {
	intact, err := n.stageIntact(ctx, rec, m)
	if err != nil || intact {
		return intact, err
	}
	healed, err := n.healOrphan(ctx, rec, m, src)
	if !healed {
		return false, err
	}
	return n.stageIntact(ctx, rec, m)
}

// callCredentials is the Ceph user a call maps with: its secrets', else
// the node plugin's own (Options.Credentials).
func (n *Node) callCredentials(secrets map[string]string) (cluster.Credentials, error) {
	cred, err := cluster.CallCredentials(secrets, n.cred, "--node-secret-dir")
	if err != nil {
		return cluster.Credentials{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return cred, nil
}
