package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/klog/v2"
)

// servePprof serves Go's profiles (/debug/pprof/) on addr until ctx ends,
// for measuring where the plugin's time and memory go
// (docs/development.md#performance). Off unless --pprof-address is set,
// and on loopback only: profiles show the process's internals (and
// /debug/pprof/cmdline its flags) to whoever can reach them.
func servePprof(ctx context.Context, addr string) (net.Addr, error) {
	if !loopbackAddress(addr) {
		return nil, fmt.Errorf("--pprof-address %q: want a loopback address such as 127.0.0.1:6060 (profiles show the plugin's internals)", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "pprof server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.InfoS("serving Go profiles", "address", l.Addr().String(), "path", "/debug/pprof/")
	return l.Addr(), nil
}
