// Package harness runs the real plugin binary against the real Ceph cluster
// that scripts/with-cluster.sh boots, for the end-to-end tests.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Cluster is the local Ceph cluster described by the env file of
// scripts/ceph-cluster.sh (exported into the environment by with-cluster.sh).
type Cluster struct {
	Conf, MonHost, FSID, Pool, ClusterID, Dir string
	AdminKey, CSIUser, CSIKey                 string
	ConfigFile                                string // the driver's cluster map
	// Namespace is the RADOS namespace of the cluster-map entry ClusterID
	// ("" = default); the inspection helpers look there.
	Namespace string
	// DataPool is an erasure-coded pool with overwrites for image data
	// (CEPH_DATA_POOL, made by ceph-cluster.sh unless CEPH_EC_POOL=0).
	DataPool string
	// Instance is the driver instance the suite runs as (instance.go).
	Instance string
}

// NamespaceArgs are the rbd/rados arguments that select the namespace.
func (c Cluster) NamespaceArgs() []string {
	if c.Namespace == "" {
		return nil
	}
	return []string{"--namespace", c.Namespace}
}

// LoadCluster reads the cluster from the environment. Without one the tests
// cannot mean anything, so it fails rather than skips.
func LoadCluster(t testing.TB) Cluster {
	t.Helper()
	c, err := ClusterFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClusterFromEnv is LoadCluster for TestMain.
func ClusterFromEnv() (Cluster, error) {
	c := Cluster{
		Conf: os.Getenv("CEPH_CONF"), MonHost: os.Getenv("CEPH_MON_HOST"), FSID: os.Getenv("CEPH_FSID"),
		Pool: os.Getenv("CEPH_POOL"), ClusterID: os.Getenv("CEPH_CLUSTER_ID"), Dir: os.Getenv("CEPH_DIR"),
		AdminKey: os.Getenv("CEPH_ADMIN_KEY"), CSIUser: os.Getenv("CEPH_CSI_USER"), CSIKey: os.Getenv("CEPH_CSI_KEY"),
		DataPool: os.Getenv("CEPH_DATA_POOL"), Instance: instanceFromEnv(),
	}
	if c.Conf == "" || c.CSIKey == "" || c.Dir == "" {
		return c, fmt.Errorf("no Ceph cluster in the environment: run these tests through `make integration` (scripts/with-cluster.sh)")
	}
	c.ConfigFile = filepath.Join(c.Dir, "cluster-config.json")
	return c, nil
}

// Secrets are the CSI secrets of the non-admin CSI user.
func (c Cluster) Secrets() map[string]string {
	return map[string]string{"userID": c.CSIUser, "userKey": c.CSIKey}
}

// Params are StorageClass parameters for the test pool.
func (c Cluster) Params(extra ...string) map[string]string {
	p := map[string]string{"clusterID": c.ClusterID, "pool": c.Pool}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

// RBD runs the rbd CLI as admin, its key read from the cluster's keyring
// file (never on a command line). Test-side inspection only: the driver's
// controller never shells out.
func (c Cluster) RBD(args ...string) (string, error) { return c.admin("rbd", args...) }

// admin runs a Ceph tool as admin, bounded, and returns its standard
// output. Its standard error goes into the error only: Ceph's clients
// print warnings there ("monclient: ... no authorizer?") that would
// otherwise read as output (a trash entry, an image name).
func (c Cluster) admin(tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"-c", c.Conf, "--id", "admin"}, args...)
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, tool, full...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), err
}

// Images lists the suite's instance's images in the test pool (all of
// them for the default instance).
func (c Cluster) Images(t testing.TB) []string {
	t.Helper()
	return c.imagesWhere(t, c.ownsImage)
}

func (c Cluster) imagesWhere(t testing.TB, keep func(string) bool) []string {
	t.Helper()
	all, err := c.listImages()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, img := range all {
		if keep(img) {
			kept = append(kept, img)
		}
	}
	return kept
}

func (c Cluster) listImages() ([]string, error) {
	out, err := c.RBD(append([]string{"ls", "-p", c.Pool}, c.NamespaceArgs()...)...)
	return strings.Fields(out), err
}

// Binary is the plugin built by `make build` (or $RBDPLUGIN).
func Binary(t testing.TB) string {
	if b := os.Getenv("RBDPLUGIN"); b != "" {
		return b
	}
	_, file, _, _ := runtime.Caller(0)
	b := filepath.Join(filepath.Dir(file), "..", "..", "bin", "rbdplugin")
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("plugin binary %s missing: run `make build` first", b)
	}
	return b
}

// Plugin is one running plugin process and a client connection to it.
type Plugin struct {
	Socket string
	Conn   *grpc.ClientConn
	args   []string
	t      testing.TB

	mu   sync.Mutex
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
}

// StartPlugin runs the plugin with the given flags (plus --endpoint and
// --cluster-config) and waits until it answers. It is stopped when the
// test ends.
func StartPlugin(t testing.TB, c Cluster, args ...string) *Plugin {
	t.Helper()
	dir, err := os.MkdirTemp("", "rbdcsi-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{Socket: filepath.Join(dir, "csi.sock"), t: t, logs: &lockedBuffer{}}
	p.args = pluginArgs(c, "unix://"+p.Socket, append(keyDirArgs(args, filepath.Join(dir, "keys")), args...))
	started := time.Now()
	p.Start()
	if os.Getenv("RBDCSI_E2E_TIMING") != "" {
		t.Logf("timing: plugin up in %.2fs", time.Since(started).Seconds())
	}
	p.Conn = dial(t, "unix://"+p.Socket, started)
	t.Cleanup(func() {
		p.Conn.Close()
		p.Stop()
		os.RemoveAll(dir)
		if t.Failed() || os.Getenv("RBDCSI_E2E_TIMING") != "" {
			t.Logf("plugin log:\n%s", p.Logs())
		}
	})
	return p
}

// pluginArgs are the plugin's arguments: the endpoint, the suite's
// cluster map and instance, then args.
func pluginArgs(c Cluster, endpoint string, args []string) []string {
	a := append([]string{"--endpoint", endpoint, "--cluster-config", c.ConfigFile}, args...)
	if c.Instance != "" {
		a = append(a, "--instance-id", c.Instance)
	}
	return a
}

// keyDirArgs give a node plugin a key directory of its own (in its
// --state-dir, else fallback), unless args name one: the plugins of
// parallel tests must not share one, which each sweeps at start. These
// machines have no tmpfs to spare for it, so the tests allow a key
// directory on disk; the shipped manifests mount one in memory (e2e/manifests
// checks that).
func keyDirArgs(args []string, fallback string) []string {
	dir := fallback
	for i, a := range args {
		switch {
		case a == "--key-dir" || strings.HasPrefix(a, "--key-dir="):
			return []string{"--allow-key-dir-on-disk"}
		case a == "--state-dir" && i+1 < len(args):
			dir = filepath.Join(args[i+1], "keys")
		case strings.HasPrefix(a, "--state-dir="):
			dir = filepath.Join(strings.TrimPrefix(a, "--state-dir="), "keys")
		}
	}
	return []string{"--key-dir", dir, "--allow-key-dir-on-disk"}
}

// dial connects to a plugin that serves at target and started at started.
func dial(t testing.TB, target string, started time.Time) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if os.Getenv("RBDCSI_E2E_TIMING") != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(timeCalls(t, started)))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// timeCalls logs each call's time and when it ended, counted from start:
// with RBDCSI_E2E_TIMING set, where a slow suite (the kernel test under
// emulation) spends its time, the gaps being the test's own work.
func timeCalls(t testing.TB, start time.Time) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		began := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		t.Logf("timing: +%.1fs %s took %.2fs (%v)", time.Since(start).Seconds(), method[strings.LastIndex(method, "/")+1:],
			time.Since(began).Seconds(), status.Code(err))
		return err
	}
}

// Start (re)starts the process and waits for its socket.
func (p *Plugin) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	// runs: bin/rbdplugin
	cmd := exec.Command(Binary(p.t), p.args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	// The cluster's keys are in the test's environment; the plugin gets its
	// keys per request, as in production, and nothing else. The crash
	// tests' --test-crash-at is refused without RBDCSI_ALLOW_TEST_CRASH.
	cmd.Env = append(childEnv(), "RBDCSI_ALLOW_TEST_CRASH=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(Slowdown() * 20 * time.Second)
	for {
		// The socket file appears at bind, a moment before the listen.
		if c, err := net.DialTimeout("unix", p.Socket, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			p.t.Fatalf("plugin exited at start:\n%s", p.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("plugin did not create %s in time:\n%s", p.Socket, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without drops a flag (and its value, when given as a separate argument)
// from the arguments the next Start uses.
func (p *Plugin) Without(flag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var args []string
	for i := 0; i < len(p.args); i++ {
		switch {
		case p.args[i] == flag:
			i++ // and its value
		case strings.HasPrefix(p.args[i], flag+"="):
		default:
			args = append(args, p.args[i])
		}
	}
	p.args = args
}

// Stop sends SIGTERM and waits for a clean exit (SIGKILL after 30 s).
func (p *Plugin) Stop() { p.signal(syscall.SIGTERM, 30*time.Second) }

// Kill sends SIGKILL, as a crash would.
func (p *Plugin) Kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

func (p *Plugin) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	endProcess(p.cmd.Process, p.done, sig, wait)
	p.cmd = nil
}

// endProcess sends sig to a process and waits until done (closed once it
// was reaped), killing it after wait.
func endProcess(proc *os.Process, done <-chan struct{}, sig syscall.Signal, wait time.Duration) {
	_ = proc.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		_ = proc.Kill()
		<-done
	}
}

// Logs returns everything the plugin printed so far.
func (p *Plugin) Logs() string { return p.logs.String() }

// Identity, Controller and Node are clients on the plugin's socket.
func (p *Plugin) Identity() csi.IdentityClient     { return csi.NewIdentityClient(p.Conn) }
func (p *Plugin) Controller() csi.ControllerClient { return csi.NewControllerClient(p.Conn) }
func (p *Plugin) Node() csi.NodeClient             { return csi.NewNodeClient(p.Conn) }
func (p *Plugin) GroupController() csi.GroupControllerClient {
	return csi.NewGroupControllerClient(p.Conn)
}

// WriteControllerSecretDir writes the userID/userKey files the controller
// reads with --controller-secret-dir, laid out as a mounted Secret.
func WriteControllerSecretDir(t testing.TB, c Cluster) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range c.Secrets() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Ctx is a context bounded like a sidecar's call.
//
// Under emulation (make kernel-test runs the node suite in a TCG guest)
// everything takes several times as long: $RBDCSI_E2E_SLOWDOWN (a whole
// number, default 1) stretches the deadline.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Slowdown()*60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Slowdown is $RBDCSI_E2E_SLOWDOWN, 1 when unset or not a positive number.
func Slowdown() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("RBDCSI_E2E_SLOWDOWN")); err == nil && n > 0 {
		return time.Duration(n)
	}
	return 1
}

// Must fails the test on err.
func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// Rados runs the rados CLI as admin.
func (c Cluster) Rados(args ...string) (string, error) { return c.admin("rados", args...) }

// Ceph runs the ceph CLI as admin.
func (c Cluster) Ceph(args ...string) (string, error) { return c.admin("ceph", args...) }

// WatchSecret samples the command line of every process, and the
// environment of the plugin and its children, until the returned function
// is called, which reports where secret was seen: keys must travel in 0600
// files, never in argv or env. (The test's own environment holds the key
// by design; the plugin is started without it.)
func WatchSecret(secret string, plugin *Plugin) (stop func() []string) {
	done := make(chan struct{})
	found := make(chan []string, 1)
	go func() {
		seen := map[string]bool{}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			root := plugin.PID()
			paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range paths {
				files := []string{p}
				if pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p))); root > 0 && descends(pid, root) {
					files = append(files, filepath.Join(filepath.Dir(p), "environ"))
				}
				for _, f := range files {
					if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(secret)) {
						seen[f+": "+strings.ReplaceAll(string(b), "\x00", " ")[:min(len(b), 80)]] = true
					}
				}
			}
			select {
			case <-done:
				var out []string
				for s := range seen {
					out = append(out, s)
				}
				found <- out
				return
			case <-t.C:
			}
		}
	}()
	return func() []string { close(done); return <-found }
}

// descends reports whether pid is root or one of its descendants.
func descends(pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid == root {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// The parent PID is the 2nd field after the ")" closing the name.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(fields[1])
	}
	return false
}

// PID of the running plugin process (0 when stopped).
func (p *Plugin) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// FilesContaining lists the regular files under dir whose content holds
// secret.
func FilesContaining(dir, secret string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(secret)) {
			out = append(out, path)
		}
		return nil
	})
	return out
}
