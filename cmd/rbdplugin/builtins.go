package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/sidecar"
)

// builtinFlags are the optional stand-ins for the node-driver-registrar
// and livenessprobe sidecars (internal/sidecar), off by default.
type builtinFlags struct {
	registration *registrationFlags
	health       *healthFlags
}

func addBuiltinFlags(fs *flag.FlagSet) *builtinFlags {
	return &builtinFlags{registration: addRegistrationFlags(fs), health: addHealthFlags(fs)}
}

// start starts whichever built-ins are configured, once the CSI endpoint
// listens; the returned function stops them and waits for them.
func (b *builtinFlags) start(ctx context.Context, f flags) (stop func(), err error) {
	if err := b.registration.validate(f.mode); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	waitHealth, err := b.health.start(ctx, f.endpoint)
	if err != nil {
		cancel()
		return nil, err
	}
	waitReg, err := b.registration.start(ctx, f.driverName)
	if err != nil {
		cancel()
		waitHealth()
		return nil, err
	}
	return func() { cancel(); waitReg(); waitHealth() }, nil
}

// registrationFlags configure the built-in kubelet registration.
type registrationFlags struct {
	kubeletPath string        // the CSI socket as kubelet sees it; empty: off
	dir         string        // kubelet's plugins_registry, as this process sees it
	retry       time.Duration // re-register this long after kubelet reports a failure
}

func addRegistrationFlags(fs *flag.FlagSet) *registrationFlags {
	r := &registrationFlags{retry: sidecar.DefaultRegistrationRetry}
	fs.StringVar(&r.kubeletPath, "kubelet-registration-path", "", "node: register with kubelet without the node-driver-registrar sidecar; the path of this plugin's CSI socket on the host, as kubelet sees it (e.g. /var/lib/kubelet/plugins/"+DefaultDriverName+"/csi.sock). Empty: off")
	fs.StringVar(&r.dir, "registration-dir", "/registration", "node, with --kubelet-registration-path: kubelet's plugin registration directory (the host's /var/lib/kubelet/plugins_registry) as mounted in this container")
	return r
}

func (r *registrationFlags) registration(driverName string) sidecar.Registration {
	return sidecar.Registration{DriverName: driverName, KubeletPath: r.kubeletPath, Dir: r.dir, Retry: r.retry}
}

// validate checks the flags against the mode; it does not touch the disk.
func (r *registrationFlags) validate(mode string) error {
	if r.kubeletPath == "" {
		return nil
	}
	if mode == "controller" {
		return errors.New("--kubelet-registration-path registers a node plugin: it needs --mode node or all")
	}
	if err := r.registration("").Validate(); err != nil {
		return fmt.Errorf("--kubelet-registration-path, --registration-dir: %w", err)
	}
	return nil
}

// start registers with kubelet until ctx ends (sidecar.Registration); with
// --kubelet-registration-path empty it does nothing.
func (r *registrationFlags) start(ctx context.Context, driverName string) (wait func(), err error) {
	if r.kubeletPath == "" {
		return func() {}, nil
	}
	wait, err = r.registration(driverName).Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("--registration-dir: %w", err)
	}
	return wait, nil
}

// healthFlags configure the built-in health endpoint.
type healthFlags struct {
	addr    string
	timeout time.Duration
}

func addHealthFlags(fs *flag.FlagSet) *healthFlags {
	h := &healthFlags{}
	fs.StringVar(&h.addr, "health-address", "", "host:port to serve /healthz on without the livenessprobe sidecar (e.g. :9808): it calls Probe on the CSI endpoint. Empty: off")
	fs.DurationVar(&h.timeout, "health-probe-timeout", 3*time.Second, "bound on one Probe call of /healthz")
	return h
}

// start serves /healthz on --health-address until ctx ends
// (sidecar.ServeHealth); the returned function waits for the server to
// stop. Off when the address is empty.
func (h *healthFlags) start(ctx context.Context, endpoint string) (wait func(), err error) {
	if h.addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", listenAddress(h.addr))
	if err != nil {
		return nil, fmt.Errorf("--health-address: %w", err)
	}
	wait, err = sidecar.ServeHealth(ctx, l, endpoint, h.timeout)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("--health-address: %w", err)
	}
	return wait, nil
}
