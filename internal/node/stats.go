package node

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
)

// stagedRecord returns the record of a staged volume, or NotFound.
func (n *Node) stagedRecord(id string) (*record, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	if _, err := decodeID(id); err != nil {
		return nil, err
	}
	rec, err := n.store.load(id)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil || !rec.Staged {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	return rec, nil
}

// recordAt returns the record of a volume that is staged or published at
// path, or NotFound. It takes no lock: stats and health only read, and
// records are replaced atomically.
func (n *Node) recordAt(id, path string) (*record, error) {
	if id != "" && path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is missing")
	}
	rec, err := n.stagedRecord(id)
	if err != nil {
		return nil, err
	}
	if _, published := rec.Targets[path]; path != rec.StagingPath && !published {
		return nil, status.Errorf(codes.NotFound, "volume %s is neither staged nor published at %.200q", id, path)
	}
	return rec, nil
}

// NodeGetVolumeStats reports bytes and inodes of a mounted filesystem, or
// the size of a raw block volume.
func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	path := req.GetVolumePath()
	rec, err := n.recordAt(req.GetVolumeId(), path)
	if err != nil {
		return nil, err
	}
	block := rec.Cap.Block
	if block && path == rec.StagingPath {
		// Nothing is mounted at a raw block volume's staging path.
		size, err := blockdev.Size(rec.dataDevice())
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %s: %s", rec.VolumeID, deviceGone(rec.dataDevice(), err))
		}
		return blockUsage(size), nil
	}
	ours, err := n.mountedFrom(path, rec.dataDevice(), block)
	if err != nil {
		return nil, statusFor(err)
	}
	if !ours {
		return nil, status.Errorf(codes.NotFound, "volume %s is not mounted at %s (any more)", rec.VolumeID, path)
	}
	if block {
		size, err := blockdev.Size(path)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: reading the size of the block device published at %s: %s", rec.VolumeID, path, deviceGone(rec.dataDevice(), err))
		}
		return blockUsage(size), nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: statfs of its filesystem at %s (device %s): %v; the node's kernel log (dmesg) tells whether the filesystem or the device failed (%s)",
			rec.VolumeID, path, rec.dataDevice(), err, ioErrorsDoc)
	}
	bsize := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     int64(st.Blocks) * bsize,
			Available: int64(st.Bavail) * bsize,
			Used:      int64(st.Blocks-st.Bfree) * bsize,
		},
		{
			Unit:      csi.VolumeUsage_INODES,
			Total:     int64(st.Files),
			Available: int64(st.Ffree),
			Used:      int64(st.Files - st.Ffree),
		},
	}}, nil
}

// ioErrorsDoc is the troubleshooting section on failed and hanging volumes.
const ioErrorsDoc = "docs/operations.md#io-errors-or-a-volume-that-hangs"

// deviceGone says that a volume's device cannot be opened, and what to
// check: a mapping taken away outside the driver, or one lost to a node
// plugin restart (fuse) or a reboot.
func deviceGone(device string, err error) string {
	return fmt.Sprintf("its device %s cannot be opened (%v): was the image unmapped outside the driver (rbd device unmap), or the node plugin restarted (fuse mappings end with it) or the node rebooted? "+
		"Unstaging and staging again (restarting the pod) maps it anew (%s)", device, err, ioErrorsDoc)
}

func blockUsage(size int64) *csi.NodeGetVolumeStatsResponse {
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}
}
