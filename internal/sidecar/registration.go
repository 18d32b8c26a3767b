package sidecar

// Kubelet plugin registration: what the node-driver-registrar sidecar
// does. kubelet watches its plugins_registry directory. For each socket
// that appears there it calls GetInfo (the plugin's type, name, CSI
// endpoint and supported versions), then NodeGetInfo on that endpoint,
// records the node ID in the CSINode object, and reports the outcome with
// NotifyRegistrationStatus. Removing the socket deregisters the driver.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// csiVersion is the CSI version the plugin speaks, as kubelet expects it
// in GetInfo (the node-driver-registrar sends the same).
const csiVersion = "1.0.0"

// DefaultRegistrationRetry is how long after kubelet reports a failed
// registration the socket is made anew.
const DefaultRegistrationRetry = 10 * time.Second

// Registration registers a node plugin with kubelet.
type Registration struct {
	// DriverName is the CSI driver name.
	DriverName string
	// KubeletPath is the plugin's CSI socket as kubelet sees it (a path
	// on the host).
	KubeletPath string
	// Dir is kubelet's plugins_registry as this process sees it.
	Dir string
	// Retry: re-register this long after kubelet reports a failure (0:
	// DefaultRegistrationRetry).
	Retry time.Duration
}

// Validate checks the paths; it does not touch the disk.
func (r Registration) Validate() error {
	if !filepath.IsAbs(r.KubeletPath) {
		return fmt.Errorf("kubelet registration path %q: want an absolute path", r.KubeletPath)
	}
	if r.Dir == "" {
		return errors.New("the registration directory must not be empty")
	}
	return nil
}

// SocketPath is where kubelet's plugin watcher finds the driver, named as
// the node-driver-registrar names it.
func (r Registration) SocketPath() string {
	return filepath.Join(r.Dir, r.DriverName+"-reg.sock")
}

// Start serves the Registration service until ctx ends, then removes the
// socket (kubelet deregisters the driver). The returned function waits for
// that.
func (r Registration) Start(ctx context.Context) (wait func(), err error) {
	if err := os.MkdirAll(r.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("registration directory: %w", err)
	}
	retry := r.Retry
	if retry <= 0 {
		retry = DefaultRegistrationRetry
	}
	reg := &registrar{
		info: &registerapi.PluginInfo{
			Type:              registerapi.CSIPlugin,
			Name:              r.DriverName,
			Endpoint:          r.KubeletPath,
			SupportedVersions: []string{csiVersion},
		},
		path:   r.SocketPath(),
		failed: make(chan struct{}, 1),
	}
	// The first socket is made synchronously, so a bad directory fails
	// the start instead of a background loop.
	srv, err := reg.serve()
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		reg.run(ctx, srv, retry)
	}()
	return func() { <-done }, nil
}

// registrar is the Registration service on one socket path.
type registrar struct {
	registerapi.UnimplementedRegistrationServer

	info   *registerapi.PluginInfo
	path   string
	failed chan struct{} // kubelet reported a failed registration

	mu         sync.Mutex
	registered bool
	serves     int // sockets made so far
}

// GetInfo tells kubelet what registers: a CSI driver, its name and socket.
func (g *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.V(2).InfoS("kubelet asked for the plugin info", "name", g.info.Name, "endpoint", g.info.Endpoint)
	return g.info, nil
}

// NotifyRegistrationStatus logs kubelet's verdict; after a failure the
// socket is made anew later, which makes kubelet try again.
func (g *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	g.mu.Lock()
	g.registered = s.PluginRegistered
	g.mu.Unlock()
	if s.PluginRegistered {
		klog.InfoS("registered with kubelet", "driver", g.info.Name, "endpoint", g.info.Endpoint)
	} else {
		klog.ErrorS(errors.New(s.Error), "kubelet refused the registration", "driver", g.info.Name, "endpoint", g.info.Endpoint)
		select {
		case g.failed <- struct{}{}:
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered reports whether kubelet's last word was a success.
func (g *registrar) Registered() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.registered
}

// serve listens on the registration socket (replacing a stale one) and
// serves the Registration service on it.
func (g *registrar) serve() (*grpc.Server, error) {
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale registration socket: %w", err)
	}
	l, err := net.Listen("unix", g.path)
	if err != nil {
		return nil, fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, g)
	g.mu.Lock()
	g.serves++
	g.mu.Unlock()
	go func() {
		if err := srv.Serve(l); err != nil {
			klog.ErrorS(err, "registration server stopped", "socket", g.path)
		}
	}()
	klog.InfoS("serving kubelet plugin registration", "socket", g.path, "endpoint", g.info.Endpoint)
	return srv, nil
}

// stop ends the server and removes the socket: kubelet deregisters.
func (g *registrar) stop(srv *grpc.Server) {
	srv.Stop()
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "removing registration socket", "socket", g.path)
	}
	g.mu.Lock()
	g.registered = false
	g.mu.Unlock()
}

// run keeps the socket until ctx ends. When kubelet reports a failure
// (say, the CSI socket did not answer NodeGetInfo yet), it waits retry and
// makes the socket anew: kubelet's plugin watcher sees a new socket and
// registers again.
func (g *registrar) run(ctx context.Context, srv *grpc.Server, retry time.Duration) {
	for {
		select {
		case <-ctx.Done():
			g.stop(srv)
			return
		case <-g.failed:
		}
		select {
		case <-ctx.Done():
			g.stop(srv)
			return
		case <-time.After(retry):
		}
		g.stop(srv)
		var err error
		for srv, err = g.serve(); err != nil; srv, err = g.serve() {
			klog.ErrorS(err, "re-creating the registration socket")
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
		}
	}
}
