package kmiptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/kms/kmip"
)

// Identity is the common name of the client certificate a Server hands
// out: the owner of the keys NewKEK makes.
const Identity = "rbdcsi"

// startTimeout bounds the server's start (Python imports included).
const startTimeout = 60 * time.Second

// Server is a PyKMIP server of one test, with its own CA, certificates,
// SQLite database and log in the test's temporary directory, listening on
// 127.0.0.1 only. It runs in a process group of its own (PyKMIP starts
// helper processes), which Stop kills whole.
type Server struct {
	// Endpoint is 127.0.0.1:<port>.
	Endpoint string
	// PKI signed the server's certificate and the client's.
	PKI *PKI
	// ClientCert and ClientKey (PEM) are the client identity Identity.
	ClientCert, ClientKey []byte

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a server and stops it when the test ends. It skips the
// test, saying why, if PyKMIP's server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("pykmip-server"); err != nil {
		t.Skip("no KMIP server to test against: pykmip-server is not installed (Debian package python3-pykmip; make deps installs it)")
	}
	s := &Server{dir: t.TempDir(), PKI: NewPKI(t)}
	s.ClientCert, s.ClientKey = s.PKI.Client(t, Identity)
	serverCert, serverKey := s.PKI.Server(t)
	// The certificate and its key in one file, named as both: Debian
	// trixie's PyKMIP (0.10.0-8, patched for Python 3.12) passes
	// key_path as the certificate and certificate_path as the key, and
	// Python's ssl finds each in a file that holds both.
	serverPEM := append(append([]byte{}, serverCert...), serverKey...)
	for name, data := range map[string][]byte{"ca.crt": s.PKI.CA, "server.pem": serverPEM} {
		if err := os.WriteFile(filepath.Join(s.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(s.dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("PyKMIP server log (tail):\n%s", s.logTail())
		}
	})
	// A free port is found by binding it and letting go; another process
	// may take it meanwhile, so a server that exits at start is retried.
	var err error
	for range 3 {
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("starting PyKMIP's server: %v\n%s", err, s.logTail())
	return nil
}

func (s *Server) start() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf(`[server]
hostname=127.0.0.1
port=%d
certificate_path=%s
key_path=%s
ca_path=%s
auth_suite=TLS1.2
policy_path=%s
enable_tls_client_auth=True
logging_level=INFO
database_path=%s
`, port, s.path("server.pem"), s.path("server.pem"), s.path("ca.crt"), s.path("policies"), s.path("pykmip.db"))
	if err := os.WriteFile(s.path("server.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	out, err := os.OpenFile(s.path("server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("pykmip-server", "-f", s.path("server.conf"), "-l", s.path("server.log"))
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, out, out
	// Its own process group, which Stop kills whole; and killed with the
	// test binary should that die before its cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			s.cmd = nil
			return fmt.Errorf("pykmip-server exited at start: %v", cmd.ProcessState)
		case <-time.After(100 * time.Millisecond):
		}
		if c, err := net.DialTimeout("tcp", s.Endpoint, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
	}
	_ = s.Stop()
	return fmt.Errorf("pykmip-server does not listen on %s after %s", s.Endpoint, startTimeout)
}

// Stop kills the server's process group and waits until no process of it
// is left. The endpoint then refuses connections. Stopping twice is fine.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	pgid := s.cmd.Process.Pid
	s.cmd = nil
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.done
	// PyKMIP's helper processes are reaped by init once orphaned.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("processes of PyKMIP's server (process group %d) are left after SIGKILL", pgid)
}

// ClientConfig is a client of identity Identity.
func (s *Server) ClientConfig() kmip.Config {
	return kmip.Config{Endpoint: s.Endpoint, CA: s.PKI.CA, ClientCert: s.ClientCert, ClientKey: s.ClientKey}
}

// NewKEK creates and activates an AES-256 key owned by Identity and
// returns its unique identifier.
func (s *Server) NewKEK(t testing.TB) string {
	t.Helper()
	c, err := kmip.New(s.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := c.CreateAES256(ctx)
	if err != nil {
		t.Fatalf("KMIP Create: %v", err)
	}
	if err := c.Activate(ctx, id); err != nil {
		t.Fatalf("KMIP Activate %s: %v", id, err)
	}
	return id
}

func (s *Server) path(name string) string { return filepath.Join(s.dir, name) }

// logTail is the end of the server's log and output, for a failed test.
func (s *Server) logTail() string {
	var b bytes.Buffer
	for _, name := range []string{"server.out", "server.log"} {
		data, _ := os.ReadFile(s.path(name))
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, data)
	}
	return b.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
