// Command demo walks volumes through their life over the plugin's real
// gRPC socket, printing what happens: `make demo` runs it against a
// throwaway local Ceph cluster, with the plugin in --mode all and the fuse
// mapper (this kind of machine has no krbd).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	socket := flag.String("socket", "", "plugin socket path")
	work := flag.String("work", "", "directory for staging and target paths")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *socket, *work); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, socket, work string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return err
	}
	nodeInfo, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return err
	}
	fmt.Printf("Connected to %s %s on %s (node %s)\n", info.Name, info.VendorVersion, socket, nodeInfo.NodeId)
	d := &demo{
		ctx: ctx, ctl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn), nodeID: nodeInfo.NodeId, work: work,
		secrets: map[string]string{"userID": os.Getenv("CEPH_CSI_USER"), "userKey": os.Getenv("CEPH_CSI_KEY")},
		params:  map[string]string{"clusterID": os.Getenv("CEPH_CLUSTER_ID"), "pool": os.Getenv("CEPH_POOL")},
	}
	return d.walk()
}

func (d *demo) walk() error {
	d.say("CreateVolume demo-data, 1 GiB (thin: costs nothing until written)")
	data := d.must(d.ctl.CreateVolume(d.ctx, &csi.CreateVolumeRequest{Name: "demo-data", VolumeCapabilities: fsCaps(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, Parameters: d.params, Secrets: d.secrets})).(*csi.CreateVolumeResponse).Volume
	fmt.Printf("    volume ID %s (%d bytes)\n", data.VolumeId, data.CapacityBytes)

	d.say("CreateVolume demo-data again: the same request name gives the same volume")
	again := d.must(d.ctl.CreateVolume(d.ctx, &csi.CreateVolumeRequest{Name: "demo-data", VolumeCapabilities: fsCaps(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, Parameters: d.params, Secrets: d.secrets})).(*csi.CreateVolumeResponse).Volume
	fmt.Printf("    same ID: %v\n", again.VolumeId == data.VolumeId)

	d.say("Attach, stage (map + mkfs + mount), publish (bind mount), write a file")
	target := d.mount(data)
	d.write(target, "hello from the first stage")
	d.say("Unpublish, unstage (unmount + unmap), then stage and publish again: the file is still there")
	d.unmount(data)
	target = d.mount(data)
	fmt.Printf("    read back: %q\n", d.read(target))

	d.say("ControllerExpandVolume to 2 GiB, then NodeExpandVolume grows the mounted filesystem")
	exp := d.must(d.ctl.ControllerExpandVolume(d.ctx, &csi.ControllerExpandVolumeRequest{VolumeId: data.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, Secrets: d.secrets})).(*csi.ControllerExpandVolumeResponse)
	fmt.Printf("    image now %d bytes; node expansion required: %v\n", exp.CapacityBytes, exp.NodeExpansionRequired)
	if _, err := d.node.NodeExpandVolume(d.ctx, &csi.NodeExpandVolumeRequest{VolumeId: data.VolumeId, VolumePath: target,
		StagingTargetPath: d.staging(data), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, VolumeCapability: fsCaps()[0]}); err != nil {
		fmt.Printf("    NodeExpandVolume: %v (ext4 grows online only with CAP_SYS_RESOURCE; the next stage grows it)\n", err)
	}
	d.stats(data, target)

	d.say("CreateSnapshot demo-snap, then overwrite the file")
	snap := d.must(d.ctl.CreateSnapshot(d.ctx, &csi.CreateSnapshotRequest{Name: "demo-snap", SourceVolumeId: data.VolumeId, Secrets: d.secrets})).(*csi.CreateSnapshotResponse).Snapshot
	fmt.Printf("    snapshot ID %s, ready: %v\n", snap.SnapshotId, snap.ReadyToUse)
	d.write(target, "overwritten after the snapshot")

	d.say("Restore the snapshot into demo-restore (copy-on-write clone) and read it")
	restore := d.restore("demo-restore", snap.SnapshotId)
	fmt.Printf("    demo-restore holds: %q; demo-data holds: %q\n", d.read(d.mount(restore)), d.read(target))
	d.unmount(restore)

	d.say("Clone demo-data into demo-clone (a PVC clone) and read it")
	clone := d.must(d.ctl.CreateVolume(d.ctx, &csi.CreateVolumeRequest{Name: "demo-clone", VolumeCapabilities: fsCaps(), Parameters: d.params, Secrets: d.secrets,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: data.VolumeId}}}})).(*csi.CreateVolumeResponse).Volume
	fmt.Printf("    demo-clone holds: %q\n", d.read(d.mount(clone)))
	d.unmount(clone)

	d.say("Delete demo-data: its snapshot and clone keep the data they need")
	d.unmount(data)
	d.must(d.ctl.DeleteVolume(d.ctx, &csi.DeleteVolumeRequest{VolumeId: data.VolumeId, Secrets: d.secrets}))
	d.list()

	d.say("Restore the snapshot again, after its source is gone")
	late := d.restore("demo-late", snap.SnapshotId)
	fmt.Printf("    demo-late holds: %q\n", d.read(d.mount(late)))
	d.unmount(late)

	d.say("Delete the snapshot and every volume: the kept data goes with the last of them")
	d.must(d.ctl.DeleteSnapshot(d.ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId, Secrets: d.secrets}))
	for _, v := range []*csi.Volume{restore, clone, late} {
		d.must(d.ctl.DeleteVolume(d.ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: d.secrets}))
	}
	d.list()
	return d.err
}

func (d *demo) restore(name, snapID string) *csi.Volume {
	return d.must(d.ctl.CreateVolume(d.ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: fsCaps(), Parameters: d.params, Secrets: d.secrets,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}})).(*csi.CreateVolumeResponse).Volume
}

func (d *demo) staging(v *csi.Volume) string { return filepath.Join(d.work, "staging-"+shortID(v)) }
func (d *demo) target(v *csi.Volume) string  { return filepath.Join(d.work, "target-"+shortID(v)) }

func shortID(v *csi.Volume) string { return v.VolumeId[len(v.VolumeId)-8:] }
