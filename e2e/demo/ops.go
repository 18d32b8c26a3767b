package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// demo carries the clients and what the walk has made so far, so that a
// failed walk can undo it.
type demo struct {
	ctx       context.Context
	ctl       csi.ControllerClient
	node      csi.NodeClient
	nodeID    string
	work      string
	pluginPID int
	secrets   map[string]string
	params    map[string]string
	step      int

	volumes []*csi.Volume          // created and not yet deleted
	snaps   []*csi.Snapshot        // likewise
	mounted map[string]*csi.Volume // by ID: attached, staged or published
}

func fsCaps() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}}
}

func fromSnapshot(s *csi.Snapshot) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.SnapshotId}}}
}

func fromVolume(v *csi.Volume) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.VolumeId}}}
}

func (d *demo) staging(v *csi.Volume) string { return filepath.Join(d.work, "staging-"+shortID(v)) }
func (d *demo) target(v *csi.Volume) string  { return filepath.Join(d.work, "target-"+shortID(v)) }

func shortID(v *csi.Volume) string { return v.VolumeId[len(v.VolumeId)-8:] }

// create makes a 1 GiB volume, or a restore or clone of its source's size
// (all of them are 1 GiB or more), and remembers it for undo.
func (d *demo) create(name string, source *csi.VolumeContentSource) (*csi.Volume, error) {
	req := &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: fsCaps(), Parameters: d.params, Secrets: d.secrets, VolumeContentSource: source}
	if source == nil {
		req.CapacityRange = &csi.CapacityRange{RequiredBytes: gib}
	}
	resp, err := d.ctl.CreateVolume(d.ctx, req)
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	v := resp.GetVolume()
	if v.GetVolumeId() == "" || v.CapacityBytes < gib {
		return nil, fmt.Errorf("CreateVolume %s answered volume %q of %d bytes, want 1 GiB or more", name, v.GetVolumeId(), v.GetCapacityBytes())
	}
	if !slices.ContainsFunc(d.volumes, func(o *csi.Volume) bool { return o.VolumeId == v.VolumeId }) {
		d.volumes = append(d.volumes, v)
	}
	return v, nil
}

func (d *demo) delete(v *csi.Volume) error {
	if _, err := d.ctl.DeleteVolume(d.ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: d.secrets}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", v.VolumeId, err)
	}
	d.volumes = slices.DeleteFunc(d.volumes, func(o *csi.Volume) bool { return o.VolumeId == v.VolumeId })
	return nil
}

func (d *demo) snapshot(name string, v *csi.Volume) (*csi.Snapshot, error) {
	resp, err := d.ctl.CreateSnapshot(d.ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: v.VolumeId, Secrets: d.secrets})
	if err != nil {
		return nil, fmt.Errorf("CreateSnapshot %s: %w", name, err)
	}
	s := resp.GetSnapshot()
	if s.GetSnapshotId() == "" {
		return nil, fmt.Errorf("CreateSnapshot %s answered no snapshot ID", name)
	}
	d.snaps = append(d.snaps, s)
	fmt.Printf("    snapshot ID %s, ready: %v\n", s.SnapshotId, s.ReadyToUse)
	// RBD snapshots are ready at once; the restores below rely on it.
	if !s.ReadyToUse {
		return nil, fmt.Errorf("snapshot %s is not ready to use", s.SnapshotId)
	}
	return s, nil
}

func (d *demo) deleteSnapshot(s *csi.Snapshot) error {
	if _, err := d.ctl.DeleteSnapshot(d.ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.SnapshotId, Secrets: d.secrets}); err != nil {
		return fmt.Errorf("DeleteSnapshot %s: %w", s.SnapshotId, err)
	}
	d.snaps = slices.DeleteFunc(d.snaps, func(o *csi.Snapshot) bool { return o.SnapshotId == s.SnapshotId })
	return nil
}

// mount attaches, stages and publishes a volume, as kubelet would for a pod,
// and returns the pod's target path.
func (d *demo) mount(v *csi.Volume) (string, error) {
	d.mounted[v.VolumeId] = v
	if _, err := d.ctl.ControllerPublishVolume(d.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.VolumeId, NodeId: d.nodeID,
		VolumeCapability: fsCaps()[0], Secrets: d.secrets}); err != nil {
		return "", fmt.Errorf("ControllerPublishVolume: %w", err)
	}
	if err := os.MkdirAll(d.staging(v), 0o750); err != nil {
		return "", err
	}
	if _, err := d.node.NodeStageVolume(d.ctx, &csi.NodeStageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v),
		VolumeCapability: fsCaps()[0], VolumeContext: v.VolumeContext, Secrets: d.secrets}); err != nil {
		return "", fmt.Errorf("NodeStageVolume: %w", err)
	}
	if _, err := d.node.NodePublishVolume(d.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v),
		TargetPath: d.target(v), VolumeCapability: fsCaps()[0]}); err != nil {
		return "", fmt.Errorf("NodePublishVolume: %w", err)
	}
	fmt.Printf("    %s is mounted at %s\n", shortID(v), d.target(v))
	return d.target(v), nil
}

// unmount undoes mount, with d.ctx.
func (d *demo) unmount(v *csi.Volume) error {
	if err := d.unmountWith(d.ctx, v); err != nil {
		return err
	}
	fmt.Printf("    %s is unmounted and unmapped\n", shortID(v))
	return nil
}

// unmountWith undoes mount; each call is idempotent, so it also undoes a
// mount that failed part-way.
func (d *demo) unmountWith(ctx context.Context, v *csi.Volume) error {
	if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: d.target(v)}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume: %w", err)
	}
	if _, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: d.staging(v)}); err != nil {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	if _, err := d.ctl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.VolumeId, NodeId: d.nodeID, Secrets: d.secrets}); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume: %w", err)
	}
	if err := os.Remove(d.staging(v)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	delete(d.mounted, v.VolumeId)
	return nil
}

// readOnce mounts a volume, checks its file holds want, and unmounts it.
func (d *demo) readOnce(v *csi.Volume, what, want string) error {
	target, err := d.mount(v)
	if err != nil {
		return err
	}
	if err := d.expect(target, what, want); err != nil {
		return err
	}
	return d.unmount(v)
}

func (d *demo) write(dir, text string) error {
	// fsync: a snapshot or clone holds what reached the image, not what
	// still sits in the page cache (as for any block-level snapshot).
	f, err := os.Create(filepath.Join(dir, "note.txt"))
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("    wrote %q (and fsync'ed it)\n", text)
	return nil
}

// expect checks that the file in dir holds want.
func (d *demo) expect(dir, what, want string) error {
	b, err := os.ReadFile(filepath.Join(dir, "note.txt"))
	if err != nil {
		return err
	}
	fmt.Printf("    %s: %q\n", what, b)
	if string(b) != want {
		return fmt.Errorf("%s %q, want %q", what, b, want)
	}
	return nil
}

// stats prints the volume's usage and returns its size in bytes.
func (d *demo) stats(v *csi.Volume, target string) (int64, error) {
	resp, err := d.node.NodeGetVolumeStats(d.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target})
	if err != nil {
		return 0, fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	var total int64 = -1
	for _, u := range resp.Usage {
		fmt.Printf("    %s: %d total, %d used\n", strings.ToLower(u.Unit.String()), u.Total, u.Used)
		if u.Unit == csi.VolumeUsage_BYTES {
			total = u.Total
		}
	}
	if total < 0 {
		return 0, errors.New("NodeGetVolumeStats reported no bytes")
	}
	return total, nil
}

// undo removes what a failed walk left: mounts, the snapshot, volumes.
// It goes on past errors, naming each.
func (d *demo) undo() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fmt.Println("    undoing what the demo made:")
	report := func(what string, err error) {
		if err != nil {
			fmt.Printf("      %s: %v\n", what, err)
		} else {
			fmt.Printf("      %s: done\n", what)
		}
	}
	for _, v := range d.mounted {
		report("unmount "+v.VolumeId, d.unmountWith(ctx, v))
	}
	for _, s := range d.snaps {
		_, err := d.ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.SnapshotId, Secrets: d.secrets})
		report("DeleteSnapshot "+s.SnapshotId, err)
	}
	for _, v := range slices.Backward(d.volumes) {
		_, err := d.ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: d.secrets})
		report("DeleteVolume "+v.VolumeId, err)
	}
}

// growsMountedExt4 tells whether the plugin can grow a mounted ext4: the
// kernel's online resize wants CAP_SYS_RESOURCE in its effective set.
func growsMountedExt4(pid int) (bool, error) {
	const capSysResource = 24
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, fmt.Errorf("the plugin's capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("the plugin's CapEff %q: %w", v, err)
			}
			return caps&(1<<capSysResource) != 0, nil
		}
	}
	return false, fmt.Errorf("no CapEff in /proc/%d/status", pid)
}
