// Command grpcfloor is the least a CSI controller can be: CreateVolume and
// DeleteVolume on a unix socket, served by a plain gRPC server, each
// doing only the Ceph work of the bench's raw sides (create the image and
// set its one metadata key; read the image, remove it) through
// internal/rbd/ceph, as the plugin does. No validation, locks, logging,
// metrics, idempotency or records. The bench runs it as it runs the
// plugin and puts the plugin beside it in P1, P2 and P5: what the plugin
// costs above it is the plugin's own; what it costs above the raw client
// is serving calls over gRPC in a process of its own.
//
// It takes the plugin's flags so the bench starts it the same way; the
// cluster comes from the environment (CEPH_MON_HOST, CEPH_POOL), the user
// from each call's secrets.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

func main() {
	endpoint := flag.String("endpoint", "", "unix:///path of the socket to serve (required)")
	flag.String("cluster-config", "", "ignored: the cluster comes from the environment")
	flag.String("metrics-address", "", "ignored: no metrics")
	flag.String("mode", "", "ignored: a controller only")
	flag.String("v", "", "ignored: no logs")
	flag.Parse()
	path, ok := strings.CutPrefix(*endpoint, "unix://")
	if !ok || os.Getenv("CEPH_MON_HOST") == "" || os.Getenv("CEPH_POOL") == "" {
		fmt.Fprintln(os.Stderr, "grpcfloor: --endpoint unix:///PATH and CEPH_MON_HOST, CEPH_POOL in the environment are required")
		os.Exit(2)
	}
	if err := serve(path); err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
}

func serve(path string) error {
	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, &controller{backend: ceph.NewBackend(conns, ceph.BackendOptions{})})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Stop() }()
	return srv.Serve(lis)
}

type controller struct {
	csi.UnimplementedControllerServer
	backend *ceph.Backend
}

func pool(secrets map[string]string) rbd.Pool {
	return rbd.Pool{
		MonHost: os.Getenv("CEPH_MON_HOST"), Name: os.Getenv("CEPH_POOL"),
		Cred: cluster.Credentials{ID: secrets["userID"], Key: secrets["userKey"]},
	}
}

// CreateVolume creates the image, named from the request name as the
// plugin names its own, with the request name in its metadata.
func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	sum := sha256.Sum256([]byte(req.GetName()))
	image := "csi-raw-gf-" + hex.EncodeToString(sum[:10])
	features := config.SingleWriterFeatures()
	if f := req.GetParameters()[config.ParamImageFeatures]; f != "" {
		features = strings.Split(f, ",")
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	err := c.backend.CreateImage(ctx, pool(req.GetSecrets()), image, rbd.ImageSpec{
		Size: uint64(size), Features: features, Metadata: map[string]string{"rbdcsi.name": req.GetName()},
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: image, CapacityBytes: size}}, nil
}

// DeleteVolume reads the image, as a delete that checks before it removes
// must, then removes it.
func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	p := pool(req.GetSecrets())
	_, err := c.backend.StatFamily(ctx, p, req.GetVolumeId(), "")
	if err == nil {
		err = c.backend.RemoveImage(ctx, p, req.GetVolumeId())
	}
	if err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}
