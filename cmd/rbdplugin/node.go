package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/command"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/driver"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/node"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
)

// nodeFlags are the flags only the node service uses.
type nodeFlags struct {
	defaultMounter string
	maxVolumes     int64
	fstrimInterval time.Duration
	cgroupRoot     string
	stateDir       string
	keyDir         string
	keyDirOnDisk   bool
	mapTimeout     time.Duration
	fsTimeout      time.Duration
}

func addNodeFlags(fs *flag.FlagSet) *nodeFlags {
	f := &nodeFlags{}
	fs.StringVar(&f.defaultMounter, "default-mounter", mapper.KRBD, "how to map a volume whose StorageClass sets no \"mounter\": "+strings.Join(config.Mounters(), ", "))
	fs.Int64Var(&f.maxVolumes, "max-volumes-per-node", 0, "volumes this node can have attached, reported in NodeGetInfo and, through the node registry, enforced by ControllerPublish (0: no limit)")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/rbdcsi/node", "node state (per-volume records, rbd-fuse directories); must survive plugin restarts")
	fs.StringVar(&f.keyDir, "key-dir", "/run/rbdcsi/keys", "where a map writes the user's key for the Ceph tools, for the length of the call; it must be memory-backed (tmpfs), so that no key ever reaches a disk")
	fs.BoolVar(&f.keyDirOnDisk, "allow-key-dir-on-disk", false, "let --key-dir be on a filesystem that is not memory-backed; refused otherwise")
	fs.DurationVar(&f.mapTimeout, "map-timeout", 60*time.Second, "bound on one map, unmap or losetup command")
	fs.DurationVar(&f.fsTimeout, "fs-timeout", 10*time.Minute, "bound on one mkfs, resize2fs or xfs_growfs")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the cgroup v2 hierarchy holding the pods' cgroups, where krbd volumes get their QoS limits (io.max); empty: krbd volumes get none")
	fs.DurationVar(&f.fstrimInterval, "fstrim-interval", 0, "run fstrim on every staged filesystem this node alone writes this often, so freed blocks go back to Ceph (0: only on SIGUSR1)")
	return f
}

// nodeService is a started Node service and what run needs of it.
type nodeService struct {
	service  *node.Node
	checks   []driver.HealthCheck
	topology map[string]string
	stop     func() // stops the trimmer and the heartbeat, and waits for them
}

// startNode builds the Node service from the flags, with its place in the
// topology and the CRUSH map, the node registry (fences, their lift, the
// heartbeat) and the periodic fstrim.
func startNode(ctx context.Context, f flags, w wiring) (*nodeService, error) {
	nb := nodeBackend{images: w.backend, pools: w.backend, blocklist: w.backend, lifts: w.obs.lifts}
	reg, err := f.registry.nodeRegistry(w.clusters, w.backend)
	if err != nil {
		return nil, err
	}
	if reg != nil {
		nb.fence = w.backend
		nb.unfence = nodereg.NewUnfencer(reg, w.backend, f.nodeID)
		nb.addresses, nb.clientAddr = reg, w.backend
	}
	topology, crush, err := f.topology.place(ctx, f.driverName, f.nodeID)
	if err != nil {
		return nil, err
	}
	n, checks, err := newNode(f, w.clusters, nb, w.kms, topology, crush, w.fault)
	if err != nil {
		return nil, err
	}
	stopTrimmer := startTrimmer(ctx, n, f.node.fstrimInterval, w.obs.trims)
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	wait, err := f.registry.startHeartbeat(hbCtx, reg, nodereg.Node{ID: f.nodeID, MaxVolumes: f.node.maxVolumes})
	if err != nil {
		stopHeartbeat()
		stopTrimmer()
		return nil, err
	}
	stop := func() { stopHeartbeat(); wait(); stopTrimmer() }
	return &nodeService{service: n, checks: checks, topology: topology, stop: stop}, nil
}

// nodeBackend is what the node reads and changes in Ceph: attachments
// (fence), its own fences' lift (unfence) and its client address per
// cluster (addresses, read with clientAddr), all only with the node
// registry, encrypted volumes' key records (images), the pools' health
// (pools) and the blocklist (blocklist); lifts counts the lifts.
type nodeBackend struct {
	fence      node.Fence
	unfence    node.Unfence
	addresses  node.AddressRegistry
	clientAddr node.ClientAddress
	lifts      node.LiftObserver
	images     node.Images
	pools      node.Pools
	blocklist  node.Blocklist
}

// newNode builds the Node service and the health checks it adds to Probe.
// With the node registry on, the controller records attachments, and the
// node fences: it maps a single-node volume only where it is attached.
func newNode(f flags, clusters *cluster.Map, backend nodeBackend, kmsConfig kms.Config, topology, crush map[string]string, fault func(string)) (*node.Node, []driver.HealthCheck, error) {
	nf := f.node
	if !slices.Contains(config.Mounters(), nf.defaultMounter) {
		return nil, nil, fmt.Errorf("--default-mounter %q: want one of %s", nf.defaultMounter, strings.Join(config.Mounters(), ", "))
	}
	if nf.maxVolumes < 0 {
		return nil, nil, fmt.Errorf("--max-volumes-per-node must not be negative")
	}
	if !filepath.IsAbs(nf.stateDir) {
		return nil, nil, fmt.Errorf("--state-dir %q must be absolute", nf.stateDir)
	}
	if err := os.MkdirAll(nf.stateDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("--state-dir: %w", err)
	}
	keyDir := nf.keyDir
	if !filepath.IsAbs(keyDir) {
		return nil, nil, fmt.Errorf("--key-dir %q must be absolute", keyDir)
	}
	keys, err := mapper.PrepareKeyDir(keyDir)
	if err != nil {
		return nil, nil, fmt.Errorf("--key-dir: %w", err)
	}
	if !nf.keyDirOnDisk {
		if err := mapper.CheckKeyDirInMemory(keyDir); err != nil {
			return nil, nil, fmt.Errorf("--key-dir: %w, or pass --allow-key-dir-on-disk", err)
		}
	}
	// Copies of LUKS2 headers, checked and then opened, live for a stage
	// (16 MiB each: the keyslots area): on the node's disk, not in the
	// small memory-backed key directory.
	headerDir := filepath.Join(nf.stateDir, "luks-headers")
	if err := luks.PrepareHeaderDir(headerDir); err != nil {
		return nil, nil, fmt.Errorf("--state-dir: %w", err)
	}
	var cred *cluster.Credentials
	if dir := f.registry.nodeSecretDir; dir != "" {
		c, err := cluster.CredentialsFromDir(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--node-secret-dir: %w", err)
		}
		cred = &c
	}
	run := command.ExecRunner{Timeout: nf.mapTimeout}
	mappers := map[string]mapper.Mapper{
		mapper.KRBD: mapper.NewKRBD(mapper.CLIOptions{Runner: run, Keys: keys, CrushLocation: crush}),
		mapper.NBD:  mapper.NewNBD(mapper.CLIOptions{Runner: run, Keys: keys, CrushLocation: crush, ConfDir: nf.stateDir}),
		mapper.Fuse: mapper.NewFuse(mapper.FuseOptions{
			Dir: filepath.Join(nf.stateDir, "fuse"), Keys: keys, Runner: run, ConnectTimeout: f.cephTimeout,
		}),
	}
	n, err := node.New(node.Options{
		NodeID:         f.nodeID,
		Mappers:        mappers,
		DefaultMounter: nf.defaultMounter,
		// No systemd scopes: they serve FUSE mount helpers, and the only
		// FUSE daemon here (rbd-fuse) is started by the plugin itself.
		// runs: mount umount (k8s.io/mount-utils mounts and unmounts with them)
		Mounter:                  mount.NewWithoutSystemd(""),
		Runner:                   command.ExecRunner{Timeout: nf.fsTimeout},
		StateDir:                 nf.stateDir,
		MaxVolumesPerNode:        nf.maxVolumes,
		Topology:                 topology,
		Clusters:                 clusters,
		Fence:                    backend.fence,
		Unfence:                  backend.unfence,
		Addresses:                backend.addresses,
		ClientAddress:            backend.clientAddr,
		Lifts:                    backend.lifts,
		Fault:                    fault,
		CgroupRoot:               nf.cgroupRoot,
		AllowInsecureMapOptions:  f.ctrl.AllowInsecureMapOptions,
		Credentials:              cred,
		AllowKEKsWithCredentials: f.ctrl.AllowKEKsWithCredentials,
		Crypt:                    luks.New(luks.Options{Runner: run, HeaderDir: headerDir}),
		Images:                   backend.images,
		Pools:                    backend.pools,
		Blocklist:                backend.blocklist,
		KMS:                      kmsConfig,
		MkfsPrezeroed:            node.MkfsPrezeroed(context.Background(), command.ExecRunner{}),
	})
	if err != nil {
		return nil, nil, err
	}
	// Say at start, not at the first stage, when the default cannot work.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mappers[nf.defaultMounter].Supported(ctx); err != nil {
		klog.ErrorS(err, "the default mounter cannot work on this node; volumes must name another one", "defaultMounter", nf.defaultMounter)
	}
	if err := n.CloseStaleCrypt(ctx); err != nil {
		klog.ErrorS(err, "closing dm-crypt devices a crash left open")
	}
	checks := []driver.HealthCheck{
		func(context.Context) error { return node.StateDirWritable(nf.stateDir) },
		func(context.Context) error { return node.ToolsPresent(command.ExecRunner{}, nf.defaultMounter) },
	}
	return n, checks, nil
}
