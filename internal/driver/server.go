package driver

import (
	"context"
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Services are the CSI services one process serves; nil ones are skipped.
type Services struct {
	Identity   csi.IdentityServer
	Controller csi.ControllerServer
	// GroupController: volume group snapshots, where the controller
	// can take them.
	GroupController csi.GroupControllerServer
	// SnapshotMetadata: changed-block tracking, beside the controller.
	SnapshotMetadata csi.SnapshotMetadataServer
	Node             csi.NodeServer
}

// Server serves CSI on one listener.
type Server struct {
	grpc *grpc.Server
}

// NewServer registers the services with request logging and reflection.
// Extra interceptors (metrics) run outside the logging one, in order.
func NewServer(s Services, interceptors ...grpc.UnaryServerInterceptor) *Server {
	return NewServerWith(s.register, interceptors...)
}

// NewServerWith is NewServer for the services register adds (the
// csi-addons ones, on their own socket): the same request logging, with
// every field marked as a CSI secret stripped, and reflection.
func NewServerWith(register func(*grpc.Server), interceptors ...grpc.UnaryServerInterceptor) *Server {
	chain := append(interceptors[:len(interceptors):len(interceptors)], logCalls) // never writes into the caller's slice
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...), grpc.ChainStreamInterceptor(logStreams))
	register(g)
	reflection.Register(g)
	return &Server{grpc: g}
}

// register adds the CSI services that are set.
func (s Services) register(g *grpc.Server) {
	if s.Identity != nil {
		csi.RegisterIdentityServer(g, s.Identity)
	}
	if s.Controller != nil {
		csi.RegisterControllerServer(g, s.Controller)
	}
	if s.GroupController != nil {
		csi.RegisterGroupControllerServer(g, s.GroupController)
	}
	if s.SnapshotMetadata != nil {
		csi.RegisterSnapshotMetadataServer(g, s.SnapshotMetadata)
	}
	if s.Node != nil {
		csi.RegisterNodeServer(g, s.Node)
	}
}

// Serve blocks until ctx ends, then stops gracefully: in-flight calls get
// up to grace to finish before they are cut.
func (s *Server) Serve(ctx context.Context, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		klog.InfoS("in-flight calls did not finish in time; stopping", "grace", grace)
		s.grpc.Stop()
	}
	return nil
}

// logCalls logs every call with its outcome. Request and response bodies
// go through protosanitizer so secrets never reach the log, and are only
// formatted when the verbosity asks for them.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if v := klog.V(5); v.Enabled() {
		v.InfoS("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req))
	}
	resp, err := handler(ctx, req)
	took := time.Since(start)
	switch {
	case err != nil:
		klog.V(2).InfoS("call failed", "method", info.FullMethod, "code", status.Code(err), "err", err, "took", took)
	default:
		if v := klog.V(5); v.Enabled() {
			v.InfoS("call done", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp), "took", took)
		} else {
			klog.V(3).InfoS("call done", "method", info.FullMethod, "took", took)
		}
	}
	return resp, err
}

// logStreams logs each streamed call (SnapshotMetadata) with its outcome;
// the request, read inside the handler, is logged as unary ones are, at
// verbosity 5, through protosanitizer.
func logStreams(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, &loggedStream{ServerStream: ss, method: info.FullMethod})
	took := time.Since(start)
	if err != nil {
		klog.V(2).InfoS("call failed", "method", info.FullMethod, "code", status.Code(err), "err", err, "took", took)
	} else {
		klog.V(3).InfoS("call done", "method", info.FullMethod, "took", took)
	}
	return err
}

// loggedStream logs the request a streamed call receives.
type loggedStream struct {
	grpc.ServerStream
	method string
}

func (s *loggedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if v := klog.V(5); v.Enabled() && err == nil {
		v.InfoS("call", "method", s.method, "request", protosanitizer.StripSecrets(m))
	}
	return err
}
