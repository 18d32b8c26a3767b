// Package node implements the CSI Node service: map an RBD image to a block
// device, format (only ever an empty device) and mount it at the staging
// path, bind-mount it into pods, and undo all of it, from a small state
// record per volume so the plugin can restart between any two calls.
package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/command"
	"github.com/rbdcsi/rbdcsi/internal/grpcerr"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// Clusters resolves a clusterID to its monitors.
type Clusters interface {
	Lookup(clusterID string) (cluster.Cluster, error)
	All() []cluster.Cluster
}

// Runner runs one external command (mkfs, blkid, resize2fs, xfs_growfs);
// command.ExecRunner is the real one.
type Runner = command.Runner

// Options configure a Node.
type Options struct {
	NodeID string
	// Mappers by mounter name (krbd, nbd, fuse); DefaultMounter picks one
	// when the volume context names none.
	Mappers        map[string]mapper.Mapper
	DefaultMounter string
	// Mounter mounts and unmounts; formatting is done here rather than by
	// mount.SafeFormatAndMount so that mkfs is bounded by a timeout, never
	// runs fsck on its own and never formats a device with a partition
	// table.
	Mounter mount.Interface
	// Runner runs blkid, mkfs and the grow tools; nil means exec with
	// CommandTimeout.
	Runner Runner
	// CommandTimeout bounds one filesystem command (mkfs of a large
	// volume is the slowest); 0 means 10 minutes.
	CommandTimeout time.Duration
	// StateDir holds the per-volume records that let unstage and
	// unpublish work after a plugin restart, without secrets. It must
	// survive plugin restarts (a hostPath on the node).
	StateDir          string
	MaxVolumesPerNode int64
	// Topology is this node's place, reported in NodeGetInfo
	// (topology.<driver>/<label> segments); nil: none.
	Topology map[string]string
	Clusters Clusters
	// Fault, for crash tests only, is called at named points between the
	// steps of an operation ("NodeStage:mapped").
	Fault func(point string)
	// Fence, when set, makes NodeStage map a single-node volume only on
	// the node its attachment record in Ceph names (the controller keeps
	// them when it runs with the node registry).
	Fence Fence
	// Unfence, when set (with the node registry), lifts this node's
	// fences once NodeUnstage has unmapped the volume (unfence.go);
	// Lifts is told each outcome (nil: nobody).
	Unfence Unfence
	Lifts   LiftObserver
	// Addresses and ClientAddress, when set (with the node registry),
	// record at each stage the IP this node reaches the volume's cluster
	// from (clientaddr.go).
	Addresses     AddressRegistry
	ClientAddress ClientAddress
	// Crypt, Images and KMS serve encrypted volumes (crypt.go); without
	// them such volumes are refused.
	Crypt  Crypt
	Images Images
	KMS    kms.Config
	// Pools serves NodeGetStorageHealth, with Credentials (nil: not
	// offered).
	Pools Pools
	// Blocklist tells NodeGetVolumeHealth whether a krbd mapping's kernel
	// client is blocklisted, with Credentials (nil: not asked).
	Blocklist Blocklist
	// MkfsPrezeroed says mkfs.ext4 takes -E assume_storage_prezeroed
	// (E2fsprogsPrezeroed): volumes created empty are then formatted
	// without leaving inode tables for the kernel to zero.
	MkfsPrezeroed bool
	// CgroupRoot is the cgroup v2 hierarchy holding the pods' cgroups,
	// where krbd volumes get their QoS limits (qos.go); "": none set.
	CgroupRoot string
	// AllowInsecureMapOptions lets volumes switch off cephx signatures
	// and data CRCs (config.CheckMapOptionsSecure); refused otherwise.
	AllowInsecureMapOptions bool
	// Credentials are the node plugin's own Ceph user (its mounted
	// Secret, --node-secret-dir): what a call whose secrets name no Ceph
	// user maps with. Nil: every call must bring one.
	Credentials *cluster.Credentials
	// AllowKEKsWithCredentials opens KMS keys found in a Secret that also
	// holds a Ceph key (kms.ErrKeysWithCredentials), for a migration.
	AllowKEKsWithCredentials bool
}

// Node is the CSI Node service.
type Node struct {
	csi.UnimplementedNodeServer

	id             string
	mappers        map[string]mapper.Mapper
	defaultMounter string
	mounter        mount.Interface
	run            Runner
	maxVolumes     int64
	topology       map[string]string
	clusters       Clusters
	store          *store
	locks          *lock.Keyed
	fence          Fence
	unfence        Unfence
	lifts          LiftObserver
	addrReg        AddressRegistry
	clientAddr     ClientAddress
	addrs          recordedAddrs
	fault          func(string)
	cgroupRoot     string
	crypt          Crypt
	images         Images
	pools          Pools
	blocklist      Blocklist
	kms            kms.Config
	mkfsPrezeroed  bool
	insecureMap    bool
	cred           *cluster.Credentials
	mixedKeys      bool
}

// New returns a Node; it fails if the state directory cannot be used.
func New(o Options) (*Node, error) {
	if o.Fault == nil {
		o.Fault = func(string) {}
	}
	if o.NodeID == "" {
		return nil, errors.New("node ID is empty")
	}
	if _, ok := o.Mappers[o.DefaultMounter]; !ok {
		return nil, fmt.Errorf("default mounter %q is not one of %s", o.DefaultMounter, strings.Join(mapperNames(o.Mappers), ", "))
	}
	if !filepath.IsAbs(o.StateDir) {
		return nil, fmt.Errorf("state directory %q is not absolute", o.StateDir)
	}
	st, err := newStore(filepath.Join(o.StateDir, "volumes"))
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	st.sweepTemp()
	run := o.Runner
	if run == nil {
		timeout := o.CommandTimeout
		if timeout <= 0 {
			timeout = 10 * time.Minute
		}
		run = command.ExecRunner{Timeout: timeout}
	}
	mounter := o.Mounter
	if mounter == nil {
		mounter = mount.NewWithoutSystemd("")
	}
	return &Node{
		id: o.NodeID, mappers: o.Mappers, defaultMounter: o.DefaultMounter, mounter: mounter,
		run: run, maxVolumes: o.MaxVolumesPerNode, topology: o.Topology, clusters: o.Clusters, store: st, locks: lock.New(), fence: o.Fence, fault: o.Fault,
		unfence: o.Unfence, lifts: o.Lifts, addrReg: o.Addresses, clientAddr: o.ClientAddress,
		cgroupRoot: o.CgroupRoot, crypt: o.Crypt, images: o.Images, pools: o.Pools, blocklist: o.Blocklist, kms: o.KMS, mkfsPrezeroed: o.MkfsPrezeroed,
		insecureMap: o.AllowInsecureMapOptions, cred: o.Credentials, mixedKeys: o.AllowKEKsWithCredentials,
	}, nil
}

func mapperNames(m map[string]mapper.Mapper) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NodeGetInfo names the node. There is no topology: every node reaches
// every cluster in the map.
func (n *Node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: n.id, MaxVolumesPerNode: n.maxVolumes}
	if len(n.topology) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: maps.Clone(n.topology)}
	}
	return resp, nil
}

// NodeGetCapabilities advertises what is implemented. Volume condition is
// served by NodeGetVolumeHealth: CSI 1.13 removed VOLUME_CONDITION.
func (n *Node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		resp.Capabilities = append(resp.Capabilities, rpcCap(t))
	}
	if n.pools != nil && n.cred != nil {
		resp.Capabilities = append(resp.Capabilities, rpcCap(csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH))
	}
	return resp, nil
}

func rpcCap(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
}

// lock takes the volume's try-lock or says Aborted at once: one operation
// per volume at a time, and a second call never waits behind the first.
func (n *Node) lock(volumeID string) (func(), error) {
	release, ok := n.locks.TryLock("vol/" + volumeID)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress; retry later", volumeID)
	}
	return release, nil
}

// begin checks what every unpublish and unstage request carries (a volume
// ID and a path), takes the volume's lock and loads its record (nil when
// there is none).
func (n *Node) begin(id, what, path string) (volid.Volume, *record, func(), error) {
	if err := checkVolumePath(id, what, path); err != nil {
		return volid.Volume{}, nil, nil, err
	}
	vol, err := decodeID(id)
	if err != nil {
		return volid.Volume{}, nil, nil, err
	}
	rec, release, err := n.lockRecord(id)
	if err != nil {
		return volid.Volume{}, nil, nil, err
	}
	return vol, rec, release, nil
}

// checkVolumePath checks the volume ID and the path that stage, publish
// and their undoing all carry, in this order.
func checkVolumePath(id, what, path string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	if err := checkPath(what, path); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// capability is parseCapability for a request: a bad one is the caller's.
func capability(c *csi.VolumeCapability) (capSpec, error) {
	spec, err := parseCapability(c)
	if err != nil {
		return capSpec{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return spec, nil
}

// decodeID decodes a volume ID; one this driver did not make names no
// volume, hence NotFound rather than InvalidArgument.
func decodeID(id string) (volid.Volume, error) {
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return volid.Volume{}, status.Errorf(codes.NotFound, "volume %.130q does not exist (not a volume ID of this driver)", id)
	}
	return vol, nil
}

// lockRecord takes the volume's lock and loads its record (nil when there
// is none); the lock is released again if the load fails.
func (n *Node) lockRecord(id string) (*record, func(), error) {
	release, err := n.lock(id)
	if err != nil {
		return nil, nil, err
	}
	rec, err := n.store.load(id)
	if err != nil {
		release()
		return nil, nil, status.Error(codes.Internal, err.Error())
	}
	return rec, release, nil
}

// mapperFor returns the mapper a record or request names.
func (n *Node) mapperFor(name string) (mapper.Mapper, error) {
	m, ok := n.mappers[name]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "mounter %q is not available on this node (available: %s)", name, strings.Join(mapperNames(n.mappers), ", "))
	}
	return m, nil
}

// mapperCodes are the codes of the mappers' causes.
func mapperCodes() grpcerr.Table {
	return grpcerr.Table{
		{Err: mapper.ErrUnsupported, Code: codes.FailedPrecondition},
		{Err: mapper.ErrNotFound, Code: codes.NotFound},
		{Err: mapper.ErrBusy, Code: codes.FailedPrecondition},
		{Err: mapper.ErrUnavailable, Code: codes.Unavailable},
		{Err: mapper.ErrPermission, Code: codes.PermissionDenied},
	}
}

// statusFor turns an error into the gRPC status a caller can act on.
// Errors that already are a status pass through.
func statusFor(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return mapperCodes().Status(err)
}

// logUndo reports a cleanup step that failed after an earlier failure;
// the caller returns the first error, this one must not be lost.
func logUndo(what string, err error) {
	if err != nil {
		klog.ErrorS(err, "cleaning up after a failed call", "step", what)
	}
}
