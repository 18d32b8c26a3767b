// Command demo walks volumes through their life over the plugin's real
// gRPC socket, printing what happens: `make demo` runs it against a
// throwaway local Ceph cluster, with the plugin in --mode all and the fuse
// mapper (this kind of machine has no krbd). Every step checks what it
// shows; the first that fails ends the demo with a non-zero exit, after
// undoing what it made.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	socket := flag.String("socket", "", "plugin socket path")
	work := flag.String("work", "", "directory for staging and target paths")
	pluginPID := flag.Int("plugin-pid", 0, "the plugin's process ID: its capabilities decide how the demo grows a mounted ext4")
	flag.Parse()
	if *socket == "" || *work == "" || *pluginPID <= 0 {
		fmt.Fprintln(os.Stderr, "usage: demo --socket PATH --work DIR --plugin-pid PID")
		os.Exit(2)
	}
	if err := run(*socket, *work, *pluginPID); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(socket, work string, pluginPID int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetPluginInfo: %w", err)
	}
	nodeInfo, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetInfo: %w", err)
	}
	fmt.Printf("Connected to %s %s on %s (node %s)\n", info.Name, info.VendorVersion, socket, nodeInfo.NodeId)
	d := &demo{
		ctx: ctx, ctl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn), nodeID: nodeInfo.NodeId, work: work,
		pluginPID: pluginPID, mounted: map[string]*csi.Volume{},
		secrets: map[string]string{"userID": os.Getenv("CEPH_CSI_USER"), "userKey": os.Getenv("CEPH_CSI_KEY")},
		params:  map[string]string{"clusterID": os.Getenv("CEPH_CLUSTER_ID"), "pool": os.Getenv("CEPH_POOL")},
	}
	if err := d.walk(); err != nil {
		fmt.Printf("\n    step %d FAILED: %v\n", d.step, err)
		d.undo()
		return fmt.Errorf("step %d: %w", d.step, err)
	}
	return nil
}
