package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"

	"github.com/rbdcsi/rbdcsi/internal/command"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/driver"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/node"
)

// nodeFlags are the flags only the node service uses.
type nodeFlags struct {
	defaultMounter string
	maxVolumes     int64
	fstrimInterval time.Duration
	cgroupRoot     string
	stateDir       string
	keyDir         string
	mapTimeout     time.Duration
	fsTimeout      time.Duration
}

func addNodeFlags(fs *flag.FlagSet) *nodeFlags {
	f := &nodeFlags{}
	fs.StringVar(&f.defaultMounter, "default-mounter", mapper.KRBD, "how to map a volume whose StorageClass sets no \"mounter\": "+strings.Join(config.Mounters, ", "))
	fs.Int64Var(&f.maxVolumes, "max-volumes-per-node", 0, "volumes this node can have attached, reported in NodeGetInfo and, through the node registry, enforced by ControllerPublish (0: no limit)")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/rbdcsi/node", "node state (per-volume records, rbd-fuse directories); must survive plugin restarts")
	fs.StringVar(&f.keyDir, "key-dir", "", "where a map writes the user's key for the Ceph tools, for the length of the call; mount a memory-backed directory here so no key ever reaches a disk. Empty: <state-dir>/keys")
	fs.DurationVar(&f.mapTimeout, "map-timeout", 60*time.Second, "bound on one map, unmap or losetup command")
	fs.DurationVar(&f.fsTimeout, "fs-timeout", 10*time.Minute, "bound on one mkfs, resize2fs or xfs_growfs")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the cgroup v2 hierarchy holding the pods' cgroups, where krbd volumes get their QoS limits (io.max); empty: krbd volumes get none")
	fs.DurationVar(&f.fstrimInterval, "fstrim-interval", 0, "run fstrim on every staged filesystem this node alone writes this often, so freed blocks go back to Ceph (0: only on SIGUSR1)")
	return f
}

// nodeBackend is what the node reads and changes in Ceph: attachments
// (fence) and its own fences' lift (unfence), both only with the node
// registry, and encrypted volumes' key records (images); lifts counts the
// lifts.
type nodeBackend struct {
	fence   node.Fence
	unfence node.Unfence
	lifts   node.LiftObserver
	images  node.Images
}

// newNode builds the Node service and the health checks it adds to Probe.
// With the node registry on, the controller records attachments, and the
// node fences: it maps a single-node volume only where it is attached.
func newNode(f flags, clusters *config.ClusterMap, backend nodeBackend, kmsConfig kms.Config, topology, crush map[string]string, fault func(string)) (*node.Node, []driver.HealthCheck, error) {
	nf := f.node
	if !slices.Contains(config.Mounters, nf.defaultMounter) {
		return nil, nil, fmt.Errorf("--default-mounter %q: want one of %s", nf.defaultMounter, strings.Join(config.Mounters, ", "))
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
	if keyDir == "" {
		keyDir = filepath.Join(nf.stateDir, "keys")
	}
	if !filepath.IsAbs(keyDir) {
		return nil, nil, fmt.Errorf("--key-dir %q must be absolute", keyDir)
	}
	keys, err := mapper.PrepareKeyDir(keyDir)
	if err != nil {
		return nil, nil, fmt.Errorf("--key-dir: %w", err)
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
		Mounter:           mount.NewWithoutSystemd(""),
		Runner:            command.ExecRunner{Timeout: nf.fsTimeout},
		StateDir:          nf.stateDir,
		MaxVolumesPerNode: nf.maxVolumes,
		Topology:          topology,
		Clusters:          clusters,
		Fence:             backend.fence,
		Unfence:           backend.unfence,
		Lifts:             backend.lifts,
		Fault:             fault,
		CgroupRoot:        nf.cgroupRoot,
		Crypt:             luks.New(luks.Options{Runner: run}),
		Images:            backend.images,
		KMS:               kmsConfig,
		MkfsPrezeroed:     mkfsPrezeroed(),
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
		func(context.Context) error { return stateDirWritable(nf.stateDir) },
		func(context.Context) error { return toolsPresent(nf.defaultMounter) },
	}
	return n, checks, nil
}

// stateDirWritable proves the records can still be written (a full or
// read-only disk would fail every stage).
func stateDirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// mkfsPrezeroed asks mke2fs its version (it prints it on stderr); false
// if it cannot tell, which keeps the lazy init every release takes.
func mkfsPrezeroed() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// runs: mke2fs (its version)
	out, err := exec.CommandContext(ctx, "mke2fs", "-V").CombinedOutput()
	ok := err == nil && node.E2fsprogsPrezeroed(string(out))
	klog.InfoS("mkfs.ext4 of volumes created empty", "assumeStoragePrezeroed", ok, "mke2fs", strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]))
	return ok
}

// toolsPresent checks the commands every stage needs, plus the default
// mounter's. Kernel support is not checked here: a liveness probe must
// not restart the plugin forever for a missing module.
func toolsPresent(defaultMounter string) error {
	tools := []string{"mount", "umount", "blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "dumpe2fs", "e2fsck", "xfs_growfs"}
	switch defaultMounter {
	case mapper.KRBD:
		tools = append(tools, "rbd")
	case mapper.NBD:
		tools = append(tools, "rbd", "rbd-nbd")
	case mapper.Fuse:
		tools = append(tools, "rbd-fuse", "losetup")
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return errors.New("tools missing on the node: " + strings.Join(missing, ", "))
	}
	return nil
}
