// Package sidecar does, inside the plugin, what two kubernetes-csi
// sidecars do, for clusters where they cannot be had: the registration
// with kubelet (node-driver-registrar) and an HTTP health endpoint that
// calls the plugin's own Probe (livenessprobe). Both are off by default;
// the manifests in deploy/kubernetes keep the upstream sidecars.
package sidecar

// The health endpoint: GET /healthz calls the plugin's Identity Probe
// through its CSI endpoint, as the livenessprobe sidecar does, so a wedged
// gRPC server fails it as well as a failing health check: 200 "ok" when
// ready, 500 with the reason otherwise.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// ServeHealth serves /healthz on l, probing the CSI endpoint, until ctx
// ends; the returned function waits for the server to stop.
func ServeHealth(ctx context.Context, l net.Listener, endpoint string, timeout time.Duration) (wait func(), err error) {
	target, err := grpcTarget(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("health endpoint: %w", err)
	}
	srv := &http.Server{Handler: healthHandler(csi.NewIdentityClient(conn), timeout), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "health server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = conn.Close()
	}()
	klog.InfoS("serving health", "address", l.Addr().String(), "path", "/healthz", "probes", endpoint)
	return func() { <-done }, nil
}

// healthHandler answers /healthz with the outcome of one Probe call.
func healthHandler(identity csi.IdentityClient, timeout time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		resp, err := identity.Probe(ctx, &csi.ProbeRequest{})
		switch {
		case err != nil:
			klog.V(2).InfoS("health check failed", "err", err)
			http.Error(w, "probe failed: "+err.Error(), http.StatusInternalServerError)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			// CSI: a missing "ready" means ready; an explicit false does not.
			http.Error(w, "plugin not ready", http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		}
	})
	return mux
}

// grpcTarget turns a CSI endpoint (unix:///path or tcp://host:port) into a
// gRPC dial target.
func grpcTarget(endpoint string) (string, error) {
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok || addr == "" {
		return "", fmt.Errorf("endpoint %q: want unix:///path or tcp://host:port", endpoint)
	}
	switch scheme {
	case "unix":
		return "unix://" + addr, nil
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "localhost"
		}
		return "passthrough:///" + net.JoinHostPort(host, port), nil
	default:
		return "", fmt.Errorf("endpoint %q: scheme %q is not unix or tcp", endpoint, scheme)
	}
}
