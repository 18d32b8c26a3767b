package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const driverName = "rbd.csi.rbdcsi.dev"

// shortTempDir is a temporary directory short enough for unix socket
// paths (108 bytes), which t.TempDir() under a long test name may not be.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// kubeletClient dials a registration socket the way kubelet's plugin
// watcher does.
func kubeletClient(t *testing.T, socket string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket: %v", path, fi.Mode())
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRegistrationServesKubelet plays kubelet's side: GetInfo, then a
// successful NotifyRegistrationStatus; stopping removes the socket.
func TestRegistrationServesKubelet(t *testing.T) {
	dir := shortTempDir(t)
	const endpoint = "/var/lib/kubelet/plugins/rbd.csi.rbdcsi.dev/csi.sock"
	r := Registration{DriverName: driverName, KubeletPath: endpoint, Dir: dir, Retry: time.Hour}
	socket := r.SocketPath()
	// A stale socket from an earlier run is replaced.
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait, err := r.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inode(t, socket)

	c := kubeletClient(t, socket)
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != driverName || info.Endpoint != endpoint {
		t.Errorf("GetInfo: %+v", info)
	}
	if len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("supported versions %v", info.SupportedVersions)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}

	cancel()
	wait()
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after stop: %v", err)
	}
}

// TestRegistrationRetriesAfterFailure: when kubelet reports a failed
// registration, the socket is made anew after the retry delay, so
// kubelet's plugin watcher registers the driver again.
func TestRegistrationRetriesAfterFailure(t *testing.T) {
	dir := shortTempDir(t)
	g := &registrar{
		info:   &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: driverName, Endpoint: "/k/csi.sock"},
		path:   filepath.Join(dir, driverName+"-reg.sock"),
		failed: make(chan struct{}, 1),
	}
	srv, err := g.serve()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx, srv, 50*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	serves := func() int { g.mu.Lock(); defer g.mu.Unlock(); return g.serves }
	inode(t, g.path)
	c := kubeletClient(t, g.path)
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "NodeGetInfo: connection refused"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new registration socket", func() bool { return serves() == 2 })
	// The new socket serves.
	c = kubeletClient(t, g.path)
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on the new socket: %v", err)
	}
	if info.Name != driverName {
		t.Errorf("GetInfo: %+v", info)
	}
	// A success does not make a new socket.
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := serves(); n != 2 {
		t.Errorf("%d sockets after a success, want 2", n)
	}
	cancel()
	<-done
	if _, err := os.Stat(g.path); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after stop: %v", err)
	}
}

func TestRegistrarRegistered(t *testing.T) {
	g := &registrar{info: &registerapi.PluginInfo{Name: "d"}, failed: make(chan struct{}, 1)}
	ctx := context.Background()
	if g.Registered() {
		t.Error("registered before kubelet said so")
	}
	_, _ = g.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	if !g.Registered() {
		t.Error("not registered after success")
	}
	// Two failures in a row do not block the caller (kubelet).
	_, _ = g.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "x"})
	_, _ = g.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "y"})
	if g.Registered() {
		t.Error("registered after a failure")
	}
}

func TestRegistrationBadDir(t *testing.T) {
	file := filepath.Join(shortTempDir(t), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := Registration{DriverName: driverName, KubeletPath: "/k/csi.sock", Dir: filepath.Join(file, "sub")}
	if _, err := r.Start(context.Background()); err == nil {
		t.Error("start succeeded with a registration dir under a file")
	}
}
