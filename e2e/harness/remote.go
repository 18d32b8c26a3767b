package harness

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// RemotePlugin is a plugin that an Agent keeps on another machine,
// serving CSI on TCP.
type RemotePlugin struct {
	Conn    *grpc.ClientConn
	agent   Agent
	addr    string
	log     string
	t       testing.TB
	started time.Time
}

// StartRemotePlugin starts the plugin through a with the given flags (plus
// --endpoint tcp://addr and --cluster-config) and waits until it answers
// at addr, a host:port of a's machine. Both machines must see the plugin
// binary (Binary), the cluster map and the file log, its output, at the
// same paths: the kernel test's guests share them. It is stopped when the
// test ends.
func StartRemotePlugin(t testing.TB, c Cluster, a Agent, addr, log string, args ...string) *RemotePlugin {
	t.Helper()
	p := &RemotePlugin{agent: a, addr: addr, log: log, t: t, started: time.Now()}
	// The guests talk over their own network: the endpoint is off loopback.
	// The key directory is the guest's: in the --state-dir args name.
	own := append([]string{"--allow-remote-endpoint"}, keyDirArgs(args, "/run/rbdcsi/keys")...)
	argv := append([]string{Binary(t)}, pluginArgs(c, "tcp://"+addr, append(own, args...))...)
	Must(t, a.Start(argv, log), "starting the plugin on %s", a.Addr)
	t.Cleanup(func() {
		if p.Conn != nil {
			p.Conn.Close()
		}
		p.Stop()
		if t.Failed() || os.Getenv("RBDCSI_E2E_TIMING") != "" {
			t.Logf("log of the plugin on %s:\n%s", a.Addr, p.Logs())
		}
	})
	for deadline := time.Now().Add(Slowdown() * 20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin on %s does not serve at %s:\n%s", a.Addr, addr, p.Logs())
		}
	}
	if os.Getenv("RBDCSI_E2E_TIMING") != "" {
		t.Logf("timing: plugin on %s up in %.2fs", a.Addr, time.Since(p.started).Seconds())
	}
	p.Conn = dial(t, addr, p.started)
	return p
}

// Redial replaces the connection with a new one: after an outage of the
// link the old one may be gone at the plugin's end.
func (p *RemotePlugin) Redial() {
	p.Conn.Close()
	p.Conn = dial(p.t, p.addr, p.started)
}

// Node is a client of its Node service.
func (p *RemotePlugin) Node() csi.NodeClient { return csi.NewNodeClient(p.Conn) }

// Logs returns everything the plugin printed so far.
func (p *RemotePlugin) Logs() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

// Stop stops it and waits until it is gone.
func (p *RemotePlugin) Stop() {
	if err := p.agent.Stop(); err != nil {
		p.t.Errorf("stopping the plugin on %s: %v", p.agent.Addr, err)
	}
}
