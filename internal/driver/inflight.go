package driver

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// DefaultMaxControllerCalls bounds the controller calls that work in Ceph
// at once: well above what 2 to 8 cores keep busy (creates level off at
// 16 on 2 here), well below the external-provisioner's 100 workers.
const DefaultMaxControllerCalls = 32

// LimitControllerCalls lets at most max controller calls that work in Ceph
// run at once; the rest wait their turn, up to their deadline. Each such
// call holds an open image, a thread in a cgo call and its share of
// librbd's and malloc's buffers while it runs, and the sidecars send as
// many at once as they have workers: without a bound the plugin's memory
// follows their settings. Identity, node and capability calls never wait:
// a liveness probe must not queue behind provisioning, nor a mount behind
// a burst of creates. max <= 0: no bound.
func LimitControllerCalls(max int) grpc.UnaryServerInterceptor {
	if max <= 0 {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	}
	slots := make(chan struct{}, max)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !worksInCeph(info.FullMethod) {
			return handler(ctx, req)
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		defer func() { <-slots }()
		return handler(ctx, req)
	}
}

// worksInCeph: the Controller and GroupController calls but their
// capabilities, and the csi-addons controller calls (replication, the
// offline reclaim, fences). The node's reclaim is an fstrim on the node.
func worksInCeph(method string) bool {
	for _, addons := range []string{"/replication.Controller/", "/reclaimspace.ReclaimSpaceController/", "/fence.FenceController/"} {
		if strings.HasPrefix(method, addons) {
			return true
		}
	}
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/csi.v1."), "/")
	switch svc {
	case "Controller":
		return name != "ControllerGetCapabilities"
	case "GroupController":
		return name != "GroupControllerGetCapabilities"
	}
	return false
}
