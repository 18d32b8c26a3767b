package main

// Built-in kubelet plugin registration: what the node-driver-registrar
// sidecar does, for clusters where that sidecar cannot be had. Off by
// default; the manifests in deploy/kubernetes keep the upstream sidecar.
//
// kubelet watches its plugins_registry directory. For each socket that
// appears there it calls GetInfo (the plugin's type, name, CSI endpoint and
// supported versions), then NodeGetInfo on that endpoint, records the node
// ID in the CSINode object, and reports the outcome with
// NotifyRegistrationStatus. Removing the socket deregisters the driver.

import (
	"context"
	"errors"
	"flag"
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

// csiVersions are the CSI versions the plugin speaks, as kubelet expects
// them in GetInfo (the node-driver-registrar sends the same).
var csiVersions = []string{"1.0.0"}

// registrationFlags configure the built-in registration.
type registrationFlags struct {
	kubeletPath string        // the CSI socket as kubelet sees it; empty: off
	dir         string        // kubelet's plugins_registry, as this process sees it
	retry       time.Duration // re-register this long after kubelet reports a failure
}

func addRegistrationFlags(fs *flag.FlagSet) *registrationFlags {
	r := &registrationFlags{retry: 10 * time.Second}
	fs.StringVar(&r.kubeletPath, "kubelet-registration-path", "", "node: register with kubelet without the node-driver-registrar sidecar; the path of this plugin's CSI socket on the host, as kubelet sees it (e.g. /var/lib/kubelet/plugins/"+DefaultDriverName+"/csi.sock). Empty: off")
	fs.StringVar(&r.dir, "registration-dir", "/registration", "node, with --kubelet-registration-path: kubelet's plugin registration directory (the host's /var/lib/kubelet/plugins_registry) as mounted in this container")
	return r
}

// validate checks the flags against the mode; it does not touch the disk.
func (r *registrationFlags) validate(mode string) error {
	if r.kubeletPath == "" {
		return nil
	}
	if mode == "controller" {
		return errors.New("--kubelet-registration-path registers a node plugin: it needs --mode node or all")
	}
	if !filepath.IsAbs(r.kubeletPath) {
		return fmt.Errorf("--kubelet-registration-path %q: want an absolute path", r.kubeletPath)
	}
	if r.dir == "" {
		return errors.New("--registration-dir must not be empty with --kubelet-registration-path")
	}
	return nil
}

// socketPath is where kubelet's plugin watcher finds the driver, named as
// the node-driver-registrar names it.
func (r *registrationFlags) socketPath(driverName string) string {
	return filepath.Join(r.dir, driverName+"-reg.sock")
}

// start serves the Registration service until ctx ends, then removes the
// socket (kubelet deregisters the driver). The returned function waits for
// that. With --kubelet-registration-path empty it does nothing.
func (r *registrationFlags) start(ctx context.Context, driverName string) (wait func(), err error) {
	if r.kubeletPath == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return nil, fmt.Errorf("--registration-dir: %w", err)
	}
	reg := &registrar{
		info: &registerapi.PluginInfo{
			Type:              registerapi.CSIPlugin,
			Name:              driverName,
			Endpoint:          r.kubeletPath,
			SupportedVersions: csiVersions,
		},
		path:   r.socketPath(driverName),
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
		reg.run(ctx, srv, r.retry)
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
