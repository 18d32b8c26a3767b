package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// cluster is the local Ceph cluster scripts/with-cluster.sh booted, as its
// env file describes it.
type cluster struct {
	Conf, MonHost, Pool, ClusterID, Dir string
	CSIUser, CSIKey                     string
	ConfigFile                          string // the driver's cluster map
	imageFeatures                       string // StorageClass imageFeatures, if set
}

func loadCluster() (cluster, error) {
	c := cluster{
		Conf: os.Getenv("CEPH_CONF"), MonHost: os.Getenv("CEPH_MON_HOST"), Pool: os.Getenv("CEPH_POOL"),
		ClusterID: os.Getenv("CEPH_CLUSTER_ID"), Dir: os.Getenv("CEPH_DIR"),
		CSIUser: os.Getenv("CEPH_CSI_USER"), CSIKey: os.Getenv("CEPH_CSI_KEY"),
	}
	if c.Conf == "" || c.CSIKey == "" || c.Dir == "" || c.MonHost == "" {
		return c, errors.New("no Ceph cluster in the environment: run through `make bench` (scripts/with-cluster.sh)")
	}
	c.ConfigFile = filepath.Join(c.Dir, "cluster-config.json")
	return c, nil
}

func (c cluster) secrets() map[string]string {
	return map[string]string{"userID": c.CSIUser, "userKey": c.CSIKey}
}

func (c cluster) params() map[string]string {
	p := map[string]string{"clusterID": c.ClusterID, "pool": c.Pool}
	if c.imageFeatures != "" {
		p["imageFeatures"] = c.imageFeatures
	}
	return p
}

// features is what the raw baseline creates images with: the same as the
// driver's (its volumes are single-writer).
func (c cluster) features() []string {
	if c.imageFeatures == "" {
		return slices.Clone(config.SingleWriterFeatures())
	}
	return strings.Split(c.imageFeatures, ",")
}

// admin runs a Ceph CLI (ceph, rbd, rados) as client.admin. The admin
// keyring is found through the cluster's ceph.conf, so no key is on the
// command line.
func (c cluster) admin(ctx context.Context, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	full := append([]string{"-c", c.Conf, "--id", "admin"}, args...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// plugin is one process serving CSI on a unix socket (the plugin or the
// gRPC floor) with a client connection on it.
type plugin struct {
	*proc
	metricsAddr string // --metrics-address, as the manifests deploy the plugin; "" if it serves none
	socket      string
	conn        *grpc.ClientConn
	// retired: stopped by its scenario, not dead of itself.
	retired bool
}

// retire stops a plugin its scenario is done with.
func (p *plugin) retire() {
	p.retired = true
	p.stop()
}

// startPlugin runs bin with args plus --endpoint, --cluster-config and
// --metrics-address through the sides' launcher; its log (stderr, where
// klog writes) goes to a file in dir, as a container's stderr would go to
// the runtime's log.
func startPlugin(bin, dir, name string, c cluster, env []string, args ...string) (*plugin, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "plugin-"+name, "csi.sock")
	full := append([]string{"--endpoint", "unix://" + socket, "--cluster-config", c.ConfigFile, "--metrics-address", addr}, args...)
	pr, err := startProc(dir, name, bin, env, full, nil)
	if err != nil {
		return nil, err
	}
	p := &plugin{proc: pr, metricsAddr: addr, socket: socket}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if conn, err := net.DialTimeout("unix", p.socket, time.Second); err == nil {
			conn.Close()
			break
		}
		if !p.alive() {
			p.stop()
			return nil, fmt.Errorf("plugin %s exited at start:\n%s", name, p.tail(30))
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("plugin %s did not open %s in time:\n%s", name, p.socket, p.tail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.conn, err = grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *plugin) controller() csi.ControllerClient { return csi.NewControllerClient(p.conn) }
func (p *plugin) node() csi.NodeClient             { return csi.NewNodeClient(p.conn) }

// stop closes the client connection and stops the process.
func (p *plugin) stop() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.proc.stop()
}

func (p *plugin) logBytes() int64 {
	st, err := os.Stat(p.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// memStat is what /proc/<pid> says about a process's memory and handles.
type memStat struct {
	RSSKiB  int64 `json:"vm_rss_kib"`
	HWMKiB  int64 `json:"vm_hwm_kib"`
	AnonKiB int64 `json:"rss_anon_kib"` // heap (Go and C) and stacks
	FileKiB int64 `json:"rss_file_kib"` // mapped files: the binary and shared libraries
	// FilePmdKiB is the part of FileKiB the kernel maps in 2 MiB pages
	// (large page-cache folios of the binary): counted whole, whatever
	// of them the process touched.
	FilePmdKiB int64 `json:"file_pmd_mapped_kib"`
	Threads    int   `json:"threads"`
	FDs        int   `json:"fds"`
}

func (m memStat) rssMiB() float64 { return float64(m.RSSKiB) / 1024 }
func (m memStat) hwmMiB() float64 { return float64(m.HWMKiB) / 1024 }

func readMem(pid int) (memStat, error) {
	var m memStat
	status, err := procFields(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	m.RSSKiB, m.HWMKiB, m.AnonKiB, m.FileKiB = status["VmRSS"], status["VmHWM"], status["RssAnon"], status["RssFile"]
	m.Threads = int(status["Threads"])
	if rollup, err := procFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		m.FilePmdKiB = rollup["FilePmdMapped"]
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	m.FDs = len(fds)
	return m, nil
}

// procFields reads the "Key: number ..." lines of a /proc file.
func procFields(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if fields := strings.Fields(v); ok && len(fields) > 0 {
			if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	return out, sc.Err()
}

// resetPeak resets VmHWM to the current RSS (Linux >= 4.0).
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// rssSampler records the largest VmRSS seen every interval until stopped:
// a second view of the peak besides VmHWM.
type rssSampler struct {
	mu   sync.Mutex
	max  int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if m, err := readMem(pid); err == nil {
				s.mu.Lock()
				s.max = max(s.max, m.RSSKiB)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the peak in KiB.
func (s *rssSampler) finish() int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}
