// Command demo walks volumes through their life over the plugin's real
// gRPC socket, printing what happens: `make demo` runs it against a
// throwaway local Ceph cluster.
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
	flag.Parse()
	if err := run(*socket); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	ctl     csi.ControllerClient
	secrets map[string]string
	params  map[string]string
	step    int
}

// run bounds the whole demo; each call gets what is left.
func run(socket string) error {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return walk(c, socket)
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Printf("\n%2d. %s\n", d.step, fmt.Sprintf(format, args...))
}

func walk(c context.Context, socket string) error {
	ctx := func() context.Context { return c }
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	d := &demo{
		ctl:     csi.NewControllerClient(conn),
		secrets: map[string]string{"userID": os.Getenv("CEPH_CSI_USER"), "userKey": os.Getenv("CEPH_CSI_KEY")},
		params:  map[string]string{"clusterID": os.Getenv("CEPH_CLUSTER_ID"), "pool": os.Getenv("CEPH_POOL")},
	}
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx(), &csi.GetPluginInfoRequest{})
	if err != nil {
		return err
	}
	fmt.Printf("Connected to %s %s on %s\n", info.Name, info.VendorVersion, socket)

	fsCap := []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}}
	d.say("CreateVolume demo-data, 1 GiB (thin: costs nothing until written)")
	vol, err := d.ctl.CreateVolume(ctx(), &csi.CreateVolumeRequest{Name: "demo-data", VolumeCapabilities: fsCap,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, Parameters: d.params, Secrets: d.secrets})
	if err != nil {
		return err
	}
	id := vol.Volume.VolumeId
	fmt.Printf("    volume ID %s (%d bytes)\n", id, vol.Volume.CapacityBytes)

	d.say("CreateVolume demo-data again: the same request name gives the same volume")
	again, err := d.ctl.CreateVolume(ctx(), &csi.CreateVolumeRequest{Name: "demo-data", VolumeCapabilities: fsCap,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, Parameters: d.params, Secrets: d.secrets})
	if err != nil {
		return err
	}
	fmt.Printf("    same ID: %v\n", again.Volume.VolumeId == id)

	d.say("ControllerExpandVolume to 2 GiB")
	exp, err := d.ctl.ControllerExpandVolume(ctx(), &csi.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, Secrets: d.secrets})
	if err != nil {
		return err
	}
	fmt.Printf("    now %d bytes; node expansion required: %v\n", exp.CapacityBytes, exp.NodeExpansionRequired)

	d.say("GetCapacity of the pool")
	capResp, err := d.ctl.GetCapacity(ctx(), &csi.GetCapacityRequest{Parameters: d.params})
	if err != nil {
		return err
	}
	fmt.Printf("    %d MiB available\n", capResp.AvailableCapacity>>20)

	d.say("CreateSnapshot demo-snap of demo-data")
	snap, err := d.ctl.CreateSnapshot(ctx(), &csi.CreateSnapshotRequest{Name: "demo-snap", SourceVolumeId: id, Secrets: d.secrets})
	if err != nil {
		return err
	}
	fmt.Printf("    snapshot ID %s, ready: %v\n", snap.Snapshot.SnapshotId, snap.Snapshot.ReadyToUse)

	d.say("CreateVolume demo-restore from the snapshot (copy-on-write clone)")
	restore, err := d.ctl.CreateVolume(ctx(), &csi.CreateVolumeRequest{Name: "demo-restore", VolumeCapabilities: fsCap,
		Parameters: d.params, Secrets: d.secrets, VolumeContentSource: &csi.VolumeContentSource{
			Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
	if err != nil {
		return err
	}
	fmt.Printf("    volume ID %s (%d bytes)\n", restore.Volume.VolumeId, restore.Volume.CapacityBytes)

	d.say("CreateVolume demo-clone from volume demo-data")
	clone, err := d.ctl.CreateVolume(ctx(), &csi.CreateVolumeRequest{Name: "demo-clone", VolumeCapabilities: fsCap,
		Parameters: d.params, Secrets: d.secrets, VolumeContentSource: &csi.VolumeContentSource{
			Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}})
	if err != nil {
		return err
	}
	fmt.Printf("    volume ID %s\n", clone.Volume.VolumeId)

	if err := d.list(c); err != nil {
		return err
	}
	d.say("DeleteVolume demo-data while its snapshot and clone still need its data")
	if _, err := d.ctl.DeleteVolume(ctx(), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: d.secrets}); err != nil {
		return err
	}
	if err := d.list(c); err != nil {
		return err
	}
	d.say("Delete the snapshot, the restore and the clone: the kept data goes with the last of them")
	if _, err := d.ctl.DeleteSnapshot(ctx(), &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId, Secrets: d.secrets}); err != nil {
		return err
	}
	for _, v := range []string{restore.Volume.VolumeId, clone.Volume.VolumeId} {
		if _, err := d.ctl.DeleteVolume(ctx(), &csi.DeleteVolumeRequest{VolumeId: v, Secrets: d.secrets}); err != nil {
			return err
		}
	}
	return d.list(c)
}

func (d *demo) list(ctx context.Context) error {
	d.say("ListVolumes")
	resp, err := d.ctl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		return err
	}
	if len(resp.Entries) == 0 {
		fmt.Println("    (none)")
	}
	for _, e := range resp.Entries {
		fmt.Printf("    %s  %d MiB\n", e.Volume.VolumeId, e.Volume.CapacityBytes>>20)
	}
	return nil
}
