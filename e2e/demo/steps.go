package main

import (
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

const (
	gib       = int64(1) << 30
	firstText = "hello from the first stage"
	laterText = "overwritten after the snapshot"
)

type step struct {
	title string
	do    func() error
}

// walk runs the steps in order and stops at the first that fails.
func (d *demo) walk() error {
	online, err := growsMountedExt4(d.pluginPID)
	if err != nil {
		return err
	}
	var (
		data, restore, clone, late *csi.Volume
		snap                       *csi.Snapshot
		target                     string
	)
	growth := "ControllerExpandVolume to 2 GiB, then NodeExpandVolume grows the mounted ext4 online"
	if !online {
		growth = "ControllerExpandVolume to 2 GiB, then grow the ext4 offline: unstage, and stage again"
	}
	steps := []step{
		{"CreateVolume demo-data, 1 GiB (thin: costs nothing until written)", func() error {
			if data, err = d.create("demo-data", nil); err != nil {
				return err
			}
			fmt.Printf("    volume ID %s (%d bytes)\n", data.VolumeId, data.CapacityBytes)
			return nil
		}},
		{"CreateVolume demo-data again: the same request name gives the same volume", func() error {
			again, err := d.create("demo-data", nil)
			if err != nil {
				return err
			}
			if again.VolumeId != data.VolumeId {
				return fmt.Errorf("the repeat gave volume %s, the first call %s", again.VolumeId, data.VolumeId)
			}
			fmt.Printf("    same ID: %s\n", again.VolumeId)
			return nil
		}},
		{"Attach, stage (map + mkfs + mount), publish (bind mount), write a file", func() error {
			if target, err = d.mount(data); err != nil {
				return err
			}
			return d.write(target, firstText)
		}},
		{"Unpublish, unstage (unmount + unmap), then stage and publish again: the file is still there", func() error {
			if err := d.unmount(data); err != nil {
				return err
			}
			if target, err = d.mount(data); err != nil {
				return err
			}
			return d.expect(target, "read back", firstText)
		}},
		{growth, func() error { return d.grow(data, &target, online) }},
		{"CreateSnapshot demo-snap, then overwrite the file", func() error {
			if snap, err = d.snapshot("demo-snap", data); err != nil {
				return err
			}
			return d.write(target, laterText)
		}},
		{"Restore the snapshot into demo-restore (copy-on-write clone) and read it", func() error {
			if restore, err = d.create("demo-restore", fromSnapshot(snap)); err != nil {
				return err
			}
			if err := d.readOnce(restore, "demo-restore holds", firstText); err != nil {
				return err
			}
			return d.expect(target, "demo-data holds", laterText)
		}},
		{"Clone demo-data into demo-clone (a PVC clone) and read it", func() error {
			if clone, err = d.create("demo-clone", fromVolume(data)); err != nil {
				return err
			}
			return d.readOnce(clone, "demo-clone holds", laterText)
		}},
		{"Delete demo-data: its snapshot and clone keep the data they need", func() error {
			if err := d.unmount(data); err != nil {
				return err
			}
			if err := d.delete(data); err != nil {
				return err
			}
			return d.expectListed(restore.VolumeId, clone.VolumeId)
		}},
		{"Restore the snapshot again, after its source is gone", func() error {
			if late, err = d.create("demo-late", fromSnapshot(snap)); err != nil {
				return err
			}
			return d.readOnce(late, "demo-late holds", firstText)
		}},
		{"Delete the snapshot and every volume: the kept data goes with the last of them", func() error {
			if err := d.deleteSnapshot(snap); err != nil {
				return err
			}
			for _, v := range []*csi.Volume{restore, clone, late} {
				if err := d.delete(v); err != nil {
					return err
				}
			}
			return d.expectListed()
		}},
	}
	for _, s := range steps {
		d.step++
		fmt.Printf("\n%2d. %s\n", d.step, s.title)
		if err := s.do(); err != nil {
			return err
		}
	}
	return nil
}

// grow expands the volume in Ceph, then grows its filesystem the way the
// plugin can: online, or (without CAP_SYS_RESOURCE, which the kernel
// wants for growing a mounted ext4) at the next stage, as the driver's
// refusal of an online grow says. Either way the filesystem must show the
// new size and keep the file.
func (d *demo) grow(v *csi.Volume, target *string, online bool) error {
	resp, err := d.ctl.ControllerExpandVolume(d.ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}, Secrets: d.secrets})
	if err != nil {
		return fmt.Errorf("ControllerExpandVolume: %w", err)
	}
	fmt.Printf("    image now %d bytes; node expansion required: %v\n", resp.CapacityBytes, resp.NodeExpansionRequired)
	if resp.CapacityBytes < 2*gib || !resp.NodeExpansionRequired {
		return fmt.Errorf("ControllerExpandVolume answered %d bytes, node expansion required %v; want 2 GiB and true", resp.CapacityBytes, resp.NodeExpansionRequired)
	}
	if online {
		fmt.Println("    the plugin has CAP_SYS_RESOURCE: the kernel grows the mounted ext4")
	} else {
		fmt.Println("    the plugin lacks CAP_SYS_RESOURCE (this machine's root has none), and the kernel grows a mounted ext4 only with it;")
		fmt.Println("    the node grows ext4 when it stages a volume, so:")
		if err := d.unmount(v); err != nil {
			return err
		}
		if *target, err = d.mount(v); err != nil {
			return err
		}
	}
	// Offline, this is the call kubelet makes after the stage: the
	// filesystem already fills the device, so it has nothing left to do.
	if _, err := d.node.NodeExpandVolume(d.ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId, VolumePath: *target,
		StagingTargetPath: d.staging(v), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}, VolumeCapability: fsCaps()[0]}); err != nil {
		return fmt.Errorf("NodeExpandVolume: %w", err)
	}
	fmt.Println("    NodeExpandVolume: done")
	total, err := d.stats(v, *target)
	if err != nil {
		return err
	}
	// An ext4 keeps a few percent for itself: 1 GiB showed ~0.95 GiB.
	if total < 3*gib/2 {
		return fmt.Errorf("the filesystem shows %d bytes after growing to 2 GiB", total)
	}
	return d.expect(*target, "read back", firstText)
}

// expectListed checks that ListVolumes lists exactly the volumes given
// (the demo's cluster holds nothing else).
func (d *demo) expectListed(ids ...string) error {
	resp, err := d.ctl.ListVolumes(d.ctx, &csi.ListVolumesRequest{})
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	fmt.Printf("    ListVolumes: %d volume(s)\n", len(resp.Entries))
	var got []string
	for _, e := range resp.Entries {
		fmt.Printf("      %s  %d MiB\n", e.Volume.VolumeId, e.Volume.CapacityBytes>>20)
		got = append(got, e.Volume.VolumeId)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		return fmt.Errorf("ListVolumes lists %v, want %v", got, want)
	}
	return nil
}
