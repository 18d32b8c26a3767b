package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// demo carries the clients and the first error: once a step fails, the
// following ones are skipped, so the walk-through reads top to bottom.
type demo struct {
	ctx     context.Context
	ctl     csi.ControllerClient
	node    csi.NodeClient
	nodeID  string
	work    string
	secrets map[string]string
	params  map[string]string
	step    int
	err     error
}

func (d *demo) say(format string, args ...any) {
	if d.err != nil {
		return
	}
	d.step++
	fmt.Printf("\n%2d. %s\n", d.step, fmt.Sprintf(format, args...))
}

// must returns the response of a call, or records its error.
func (d *demo) must(resp any, err error) any {
	if err != nil && d.err == nil {
		d.err = err
	}
	return resp
}

func fsCaps() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}}
}

// mount attaches, stages and publishes a volume, as kubelet would for a pod,
// and returns the pod's target path.
func (d *demo) mount(v *csi.Volume) string {
	if d.err != nil || v == nil {
		return ""
	}
	d.must(d.ctl.ControllerPublishVolume(d.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.VolumeId, NodeId: d.nodeID,
		VolumeCapability: fsCaps()[0], Secrets: d.secrets}))
	if err := os.MkdirAll(d.staging(v), 0o750); err != nil && d.err == nil {
		d.err = err
	}
	d.must(d.node.NodeStageVolume(d.ctx, &csi.NodeStageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v),
		VolumeCapability: fsCaps()[0], VolumeContext: v.VolumeContext, Secrets: d.secrets}))
	d.must(d.node.NodePublishVolume(d.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v),
		TargetPath: d.target(v), VolumeCapability: fsCaps()[0]}))
	if d.err == nil {
		fmt.Printf("    %s is mounted at %s\n", shortID(v), d.target(v))
	}
	return d.target(v)
}

// unmount undoes mount.
func (d *demo) unmount(v *csi.Volume) {
	if d.err != nil || v == nil {
		return
	}
	d.must(d.node.NodeUnpublishVolume(d.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: d.target(v)}))
	d.must(d.node.NodeUnstageVolume(d.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v)}))
	d.must(d.ctl.ControllerUnpublishVolume(d.ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.VolumeId, NodeId: d.nodeID, Secrets: d.secrets}))
	if d.err == nil {
		_ = os.Remove(d.staging(v)) // empty once unstaged
		fmt.Printf("    %s is unmounted and unmapped\n", shortID(v))
	}
}

func (d *demo) write(dir, text string) {
	if d.err != nil {
		return
	}
	// fsync: a snapshot or clone holds what reached the image, not what
	// still sits in the page cache (as for any block-level snapshot).
	f, err := os.Create(filepath.Join(dir, "note.txt"))
	if err == nil {
		_, err = f.WriteString(text)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		d.err = err
		return
	}
	fmt.Printf("    wrote %q (and fsync'ed it)\n", text)
}

func (d *demo) read(dir string) string {
	if d.err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, "note.txt"))
	if err != nil {
		d.err = err
	}
	return string(b)
}

func (d *demo) stats(v *csi.Volume, target string) {
	resp, ok := d.must(d.node.NodeGetVolumeStats(d.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target})).(*csi.NodeGetVolumeStatsResponse)
	if !ok || resp == nil {
		return
	}
	for _, u := range resp.Usage {
		fmt.Printf("    %s: %d total, %d used\n", strings.ToLower(u.Unit.String()), u.Total, u.Used)
	}
}

func (d *demo) list() {
	if d.err != nil {
		return
	}
	resp, ok := d.must(d.ctl.ListVolumes(d.ctx, &csi.ListVolumesRequest{})).(*csi.ListVolumesResponse)
	if !ok || resp == nil {
		return
	}
	fmt.Printf("    ListVolumes: %d volume(s)\n", len(resp.Entries))
	for _, e := range resp.Entries {
		fmt.Printf("      %s  %d MiB\n", e.Volume.VolumeId, e.Volume.CapacityBytes>>20)
	}
}
