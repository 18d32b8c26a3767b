// Command rbdplugin is the Ceph RBD CSI driver: one binary serving the
// Identity service plus the Controller service, the Node service, or both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/controller/upkeep"
	"github.com/rbdcsi/rbdcsi/internal/driver"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/metrics"
	"github.com/rbdcsi/rbdcsi/internal/node"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

// DefaultDriverName is the one driver name used across deploy/ and tests.
const DefaultDriverName = "rbd.csi.rbdcsi.dev"

type flags struct {
	endpoint      string
	nodeID        string
	driverName    string
	mode          string
	clusterConfig string
	kmsConfig     string
	secretDir     string
	kmsSecretDir  string
	cephTimeout   time.Duration
	grace         time.Duration
	ctrl          controller.Options
	registry      *registryFlags
	crashAt       string
	metricsAddr   string
	pprofAddr     string
	maxCtrlCalls  int
	node          *nodeFlags
	topology      *topologyFlags
	builtins      *builtinFlags
	showVersion   bool
	remoteTCP     bool
	// addonsEndpoint serves the csi-addons services (addons.go).
	addonsEndpoint string
}

func parseFlags(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("rbdplugin", flag.ContinueOnError)
	fs.StringVar(&f.endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path/to/csi.sock or tcp://host:port")
	fs.StringVar(&f.addonsEndpoint, "csi-addons-endpoint", "", "serve the csi-addons services on this endpoint of their own, unix:///path/to/csi-addons.sock or tcp://host:port, for the csi-addons sidecar: Identity, and in controller mode VolumeReplication, ReclaimSpace (sparsify) and NetworkFence, in node mode ReclaimSpace (fstrim), in all mode both (docs/reference.md); empty: not served")
	fs.BoolVar(&f.remoteTCP, "allow-remote-endpoint", false, "let --endpoint=tcp:// bind an address other than loopback: the CSI API has no authentication, so only for tests across machines")
	fs.StringVar(&f.nodeID, "nodeid", "", "this node's ID (the Kubernetes node name); required in node mode")
	fs.StringVar(&f.driverName, "drivername", DefaultDriverName, "CSI driver name, as in the CSIDriver object and StorageClasses")
	fs.StringVar(&f.mode, "mode", "all", "services to run: controller, node or all")
	fs.StringVar(&f.clusterConfig, "cluster-config", "/etc/rbdcsi/cluster-config.json", "JSON list of {clusterID, monitors[]}")
	fs.StringVar(&f.kmsConfig, "kms-config", "", "JSON map from KMS ID (a StorageClass's encryptionKMSID) to where its key encryption keys come from (docs/encryption.md); empty: encrypted classes are refused")
	fs.DurationVar(&f.ctrl.KEKRotationInterval, "kek-rotation-interval", upkeep.DefaultKEKRotationInterval, "with --kms-config, --controller-secret-dir and --kms-secret-dir: how often the controller re-wraps the data keys of encrypted volumes whose KEK is not their KMS's current one, with the keys in --kms-secret-dir")
	fs.StringVar(&f.secretDir, "controller-secret-dir", "", "directory with userID and userKey files (a mounted Secret): the controller's own Ceph user, for the calls whose secrets name none (every call of a StorageClass that names no Secret or only a KEK Secret, ListVolumes, GetCapacity, ControllerGetVolume, the background work)")
	fs.StringVar(&f.kmsSecretDir, "kms-secret-dir", "", "controller: directory of the KMS keys (mounted KEK Secrets, one keyPrefix per KMS; KMIP client credentials) the KEK rotation re-wraps with; empty: no rotation")
	fs.DurationVar(&f.cephTimeout, "ceph-timeout", 10*time.Second, "bound on every Ceph operation")
	fs.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long in-flight calls may run after SIGTERM")
	fs.IntVar(&f.ctrl.CloneDepthSoft, "clone-depth-soft", controller.DefaultCloneDepthSoft, "clones deeper than this are flattened in the background")
	fs.IntVar(&f.ctrl.CloneDepthHard, "clone-depth-hard", controller.DefaultCloneDepthHard, "clones deeper than this are flattened before CreateVolume succeeds")
	fs.IntVar(&f.ctrl.MaxSnapshotsPerImage, "max-snapshots-per-image", controller.DefaultMaxSnapshotsPerImage, "most snapshots one volume may have (krbd maps at most 510)")
	fs.DurationVar(&f.ctrl.SweepInterval, "reclaim-sweep-interval", upkeep.DefaultSweepInterval, "after a delete, and with --controller-secret-dir in every pool it can read, sweep a pool at most this often for what crashed or abandoned requests left (hidden images nothing needs, unfinished images, temporary clone snapshots older than this); 0 turns it off")
	fs.Func("volume-name-prefixes", "comma-separated StorageClass volumeNamePrefix values allowed besides csi-vol- (like k8s-prod-); every image so named is taken for this driver's: listed, deleted, swept when unfinished", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if err := config.ValidVolumeNamePrefix(p); err != nil {
				return err
			}
			f.ctrl.VolumeNamePrefixes = append(f.ctrl.VolumeNamePrefixes, p)
		}
		return nil
	})
	fs.Func("instance-id", "scopes what this driver makes and finds in a pool to its own Kubernetes cluster, for several clusters sharing pools: up to 16 lower-case letters, digits and '-'; the same on the controller and every node. Empty (the default): the names the driver always used", func(v string) error {
		if err := cluster.ValidInstanceID(v); err != nil {
			return err
		}
		f.ctrl.InstanceID = v
		return nil
	})
	fs.DurationVar(&f.ctrl.FenceExpiry, "fence-expiry", controller.DefaultFenceExpiry, "with --node-registry: how long the Ceph clients of a node that still had a single-node volume open when it was detached (a force detach) stay blocklisted, unless the node lifts them when it unstages the volume. A cut-off node whose mapping outlives this may write again: make it longer than a node may stay cut off")
	fs.IntVar(&f.maxCtrlCalls, "max-controller-calls", driver.DefaultMaxControllerCalls, "most controller calls that work in Ceph at once (creates, deletes, snapshots, expansions, attachments); the rest wait their turn up to their deadline, which bounds the memory a burst from the sidecars takes. Probes, node calls and capabilities never wait. 0: no bound")
	fs.BoolVar(&f.ctrl.AllowKEKsWithCredentials, "allow-keks-with-credentials", false, "controller and node: use KEKs (and KMIP client keys) found in a Secret that also holds a Ceph key, as releases before this one kept them; refused otherwise (docs/encryption.md#keys-and-credentials)")
	fs.BoolVar(&f.ctrl.AllowInsecureMapOptions, "allow-insecure-map-options", false, "controller and node: let StorageClasses' mapOptions switch off cephx message signatures and data CRCs (nocrc, nocephx_require_signatures, nocephx_sign_messages); refused otherwise")
	fs.StringVar(&f.pprofAddr, "pprof-address", "", "host:port to serve Go's profiles on, at /debug/pprof/ (e.g. 127.0.0.1:6060), to measure where time and memory go; empty (the default) turns it off")
	fs.StringVar(&f.metricsAddr, "metrics-address", "", "host:port to serve Prometheus metrics on, at /metrics (e.g. :9809); empty turns metrics off")
	f.node = addNodeFlags(fs)
	f.registry = addRegistryFlags(fs)
	f.topology = addTopologyFlags(fs)
	f.builtins = addBuiltinFlags(fs)
	fs.BoolVar(&f.showVersion, "version", false, "print the version, the commit and the librbd the binary was built against, then exit")
	addCrashFlag(fs, &f.crashAt)
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	kfs.VisitAll(func(fl *flag.Flag) { fs.Var(fl.Value, fl.Name, fl.Usage) })
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.showVersion {
		return f, nil
	}
	f.registry.instance = f.ctrl.InstanceID
	f.ctrl.DriverName = f.driverName
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch f.mode {
	case "controller", "node", "all":
	default:
		return f, fmt.Errorf("--mode %q: want controller, node or all", f.mode)
	}
	if err := checkEndpoint("--endpoint", f.endpoint, f.remoteTCP); err != nil {
		return f, err
	}
	if err := checkAddonsEndpoint(f); err != nil {
		return f, err
	}
	if f.mode != "controller" && f.nodeID == "" {
		return f, fmt.Errorf("--nodeid is required in %s mode", f.mode)
	}
	if f.ctrl.FenceExpiry < time.Second {
		return f, fmt.Errorf("--fence-expiry %v: want at least 1s (Ceph counts blocklist expiries in seconds)", f.ctrl.FenceExpiry)
	}
	if err := checkCrashFlag(f.crashAt); err != nil {
		return f, err
	}
	if !validDriverName(f.driverName) {
		return f, fmt.Errorf("--drivername %q: want a reverse-DNS name of at most 63 characters, like %s", f.driverName, DefaultDriverName)
	}
	return f, nil
}

// validDriverName follows the CSI spec: at most 63 characters, alphanumeric
// at both ends, '-', '_' and '.' inside.
func validDriverName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.')) {
			return false
		}
	}
	return true
}

func main() {
	limitMallocArenas()
	f, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rbdplugin:", err)
		os.Exit(2)
	}
	if f.showVersion {
		fmt.Println(versionLine())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, f); err != nil {
		klog.ErrorS(err, "rbdplugin stopped")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// run serves the services of the mode until ctx ends: the Identity
// service, and the controller's and the node's (controller.go, node.go).
func run(ctx context.Context, f flags) error {
	clusters, err := cluster.LoadMap(f.clusterConfig)
	if err != nil {
		return err
	}
	kmsConfig, err := loadKMSConfig(f.kmsConfig)
	if err != nil {
		return err
	}
	if f.pprofAddr != "" {
		if _, err := servePprof(ctx, f.pprofAddr); err != nil {
			return err
		}
	}
	var interceptors []grpc.UnaryServerInterceptor
	var obs observers
	if f.metricsAddr != "" {
		m, err := startMetrics(ctx, f.metricsAddr)
		if err != nil {
			return err
		}
		interceptors = append(interceptors, m.UnaryInterceptor())
		obs = observers{ceph: m, upkeep: m, trims: m, lifts: m}
	}
	// Inside the metrics: their latency counts the wait for a slot.
	interceptors = append(interceptors, driver.LimitControllerCalls(f.maxCtrlCalls))
	checks := []driver.HealthCheck{func(context.Context) error { return clusters.Health() }}
	opts := ceph.DefaultOptions()
	opts.OpTimeout = f.cephTimeout
	conns := ceph.NewConns(opts)
	defer conns.Close()
	w := wiring{clusters: clusters, kms: kmsConfig, fault: crashAt(f.crashAt), obs: obs, locks: lock.New(), interceptors: interceptors}
	w.backend = ceph.NewBackend(conns, ceph.BackendOptions{Observer: obs.ceph, Fault: w.fault})
	// A csi-addons server that fails ends the whole plugin, as the CSI
	// one does.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var services driver.Services
	if f.mode != "node" {
		ctrl, err := startController(f, w)
		if err != nil {
			return err
		}
		defer ctrl.Close()
		services.Controller = ctrl
		services.SnapshotMetadata = ctrl.SnapshotMetadata()
		// Group snapshots need librbd's rbd_clone4 (Squid 19+): served
		// and advertised only where the library has it.
		if err := ctrl.GroupSnapshots(); err != nil {
			klog.InfoS("not serving group snapshots", "reason", err.Error())
		} else {
			services.GroupController = ctrl.GroupController()
		}
	}
	var topology map[string]string
	var nodeService *node.Node
	if f.mode != "controller" {
		n, err := startNode(ctx, f, w)
		if err != nil {
			return err
		}
		defer n.stop()
		services.Node, topology, nodeService = n.service, n.topology, n.service
		checks = append(checks, n.checks...)
	}
	// A controller places volumes by topology wherever the CO asks for it;
	// a node plugin advertises topology only when it reports its own, as
	// the CSI spec requires of NodeGetInfo then.
	caps := driver.Capabilities{Controller: services.Controller != nil, GroupController: services.GroupController != nil,
		SnapshotMetadata: services.SnapshotMetadata != nil, Topology: f.mode == "controller" || len(topology) > 0}
	services.Identity = driver.NewIdentity(f.driverName, version, caps, checks...)

	l, cleanup, err := driver.Listen(f.endpoint)
	if err != nil {
		return err
	}
	defer cleanup()
	stopBuiltins, err := f.builtins.start(ctx, f) // kubelet registration, /healthz (internal/sidecar)
	if err != nil {
		return err
	}
	defer stopBuiltins()
	stopAddons, err := startAddons(ctx, f, w, nodeService, cancel)
	if err != nil {
		return err
	}
	klog.InfoS("serving", "driver", f.driverName, "version", version, "mode", f.mode, "endpoint", f.endpoint)
	err = driver.NewServer(services, interceptors...).Serve(ctx, l, f.grace)
	cancel(nil)
	stopAddons()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

// observers are told what the services do (the metrics, with
// --metrics-address; nil each without).
type observers struct {
	ceph   rbd.Observer
	upkeep upkeep.Observer
	trims  node.TrimObserver
	lifts  node.LiftObserver
}

// wiring is what the controller and the node services are built from.
type wiring struct {
	clusters *cluster.Map
	backend  *ceph.Backend
	kms      kms.Config
	fault    func(string)
	obs      observers
	// locks are the controller's per-volume locks, which the csi-addons
	// services share.
	locks *lock.Keyed
	// interceptors wrap every unary call, of each server: metrics, the
	// bound on calls that work in Ceph (one bound for both servers).
	interceptors []grpc.UnaryServerInterceptor
}

// startMetrics serves Prometheus metrics on addr until ctx ends. The
// returned Metrics feeds them (its interceptor; it is also the
// rbd.Observer for Ceph operation latency).
func startMetrics(ctx context.Context, addr string) (*metrics.Metrics, error) {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", listenAddress(addr))
	if err != nil {
		return nil, fmt.Errorf("--metrics-address: %w", err)
	}
	go func() {
		if err := metrics.Serve(ctx, l, reg); err != nil {
			klog.ErrorS(err, "metrics server stopped")
		}
	}()
	klog.InfoS("serving metrics", "address", l.Addr().String(), "path", "/metrics")
	return m, nil
}
