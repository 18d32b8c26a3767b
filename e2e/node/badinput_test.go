package node

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestBadInput sends invalid requests and checks each gets the right code
// and changes nothing on the node: no mount, no mapping, no new file
// anywhere under the test's paths (the plugin's state included).
func TestBadInput(t *testing.T) {
	e := setup(t)
	c := mountCap("ext4", multiWriter)
	v := e.createVolume("node-bad", 64*mib, c)
	other := e.createVolume("node-bad-other", 64*mib, c)
	staging := e.path("staging")
	e.stage(v, staging, c)

	file := e.path("a-file")
	harness.Must(t, os.WriteFile(file, []byte("keep me"), 0o644), "write")
	foreign := e.path("foreign")
	harness.Must(t, os.Mkdir(foreign, 0o755), "mkdir")
	harness.Must(t, syscall.Mount("tmpfs", foreign, "tmpfs", 0, "size=1m"), "mount tmpfs")
	defer syscall.Unmount(foreign, 0)

	unknownID := "v1:" + e.c.ClusterID + ":" + e.c.Pool + ":csi-vol-00000000000000000000"
	stage := func(mod func(*csi.NodeStageVolumeRequest)) func() error {
		return func() error {
			req := e.stageReq(other, e.path("staging-other"), mountCap("ext4", multiWriter))
			req.VolumeContext = clone(req.VolumeContext)
			mod(req)
			_, err := e.nc.NodeStageVolume(ctx(t), req)
			return err
		}
	}
	publish := func(mod func(*csi.NodePublishVolumeRequest)) func() error {
		return func() error {
			req := e.publishReq(v, staging, e.path("target"), c, false)
			mod(req)
			_, err := e.nc.NodePublishVolume(ctx(t), req)
			return err
		}
	}
	withFlags := func(flags ...string) *csi.VolumeCapability { return mountCap("ext4", multiWriter, flags...) }

	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"stage: relative staging path", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "rel/staging" }), codes.InvalidArgument},
		{"stage: staging path with ..", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = e.dir + "/x/../staging-other" }), codes.InvalidArgument},
		{"stage: empty staging path", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "" }), codes.InvalidArgument},
		{"stage: staging path is a file", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = file }), codes.InvalidArgument},
		{"stage: empty volume ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "" }), codes.InvalidArgument},
		{"stage: unknown volume ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = unknownID }), codes.NotFound},
		{"stage: malformed volume ID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "not-a-volume" }), codes.NotFound},
		{"stage: unknown cluster", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeId = "v1:no-such-cluster:rbd:csi-vol-00000000000000000000"
			r.VolumeContext = nil
		}), codes.NotFound},
		{"stage: missing capability", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = nil }), codes.InvalidArgument},
		{"stage: unknown fsType", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("btrfs", multiWriter) }), codes.InvalidArgument},
		{"stage: unknown mounter", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["mounter"] = "magic" }), codes.InvalidArgument},
		{"stage: pool not the volume's", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["pool"] = "other" }), codes.InvalidArgument},
		{"stage: mapOptions smuggling an argument", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["mapOptions"] = "ro --id=admin" }), codes.InvalidArgument},
		{"stage: a user but no key", stage(func(r *csi.NodeStageVolumeRequest) { r.Secrets = map[string]string{"userID": "csi"} }), codes.InvalidArgument},
		{"stage: a key that is not one", stage(func(r *csi.NodeStageVolumeRequest) {
			r.Secrets = map[string]string{"userID": "csi", "userKey": "not a key; rm -rf /"}
		}), codes.InvalidArgument},
		{"stage: flag with a comma", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags("noatime,remount") }), codes.InvalidArgument},
		{"stage: flag with a space", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags("ro rw") }), codes.InvalidArgument},
		{"stage: flag like an option", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags("--bind") }), codes.InvalidArgument},
		{"stage: bind flag", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags("bind") }), codes.InvalidArgument},
		{"stage: mount helper flag", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags("X-mount.mkdir=0755") }), codes.InvalidArgument},
		{"stage: quoted flag", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = withFlags(`context="a,b"`) }), codes.InvalidArgument},
		{"stage: read-only access to an empty volume (never formatted)", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = mountCap("ext4", readerOnly)
		}), codes.FailedPrecondition},
		{"publish: target is a file", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = file }), codes.InvalidArgument},
		{"publish: relative target", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "target" }), codes.InvalidArgument},
		{"publish: target with ..", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = e.dir + "/../target" }), codes.InvalidArgument},
		{"publish: empty target", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }), codes.InvalidArgument},
		{"publish: empty volume ID", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }), codes.InvalidArgument},
		{"publish: missing capability", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }), codes.InvalidArgument},
		{"publish: flag with a comma", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = withFlags("ro,exec") }), codes.InvalidArgument},
		{"publish: volume not staged", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = other.VolumeId }), codes.FailedPrecondition},
		{"publish: unknown volume ID", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "not-a-volume" }), codes.NotFound},
		{"publish: no staging path", publish(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "" }), codes.FailedPrecondition},
		{"publish: other staging path", publish(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = e.path("elsewhere") }), codes.FailedPrecondition},
		{"publish: as block", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = blockCap(multiWriter) }), codes.FailedPrecondition},
		{"publish: onto someone else's mount", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = foreign }), codes.FailedPrecondition},
		{"unpublish: relative target", func() error {
			_, err := e.nc.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: "target"})
			return err
		}, codes.InvalidArgument},
		{"unpublish: empty volume ID", func() error {
			_, err := e.nc.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{TargetPath: e.path("target")})
			return err
		}, codes.InvalidArgument},
		{"unpublish: someone else's mount", func() error {
			_, err := e.nc.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: foreign})
			return err
		}, codes.FailedPrecondition},
		{"unstage: path with ..", func() error {
			_, err := e.nc.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging + "/.."})
			return err
		}, codes.InvalidArgument},
		{"unstage: never staged, someone else's mount", func() error {
			_, err := e.nc.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: other.VolumeId, StagingTargetPath: foreign})
			return err
		}, codes.OK},
		{"unstage: staged elsewhere", func() error {
			_, err := e.nc.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: e.path("elsewhere")})
			return err
		}, codes.OK},
		{"stats: unknown volume", func() error {
			_, err := e.nc.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: unknownID, VolumePath: staging})
			return err
		}, codes.NotFound},
		{"stats: unknown path", func() error {
			_, err := e.nc.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: e.path("elsewhere")})
			return err
		}, codes.NotFound},
		{"stats: empty path", func() error {
			_, err := e.nc.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId})
			return err
		}, codes.InvalidArgument},
		{"expand: unknown volume", func() error {
			_, err := e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{VolumeId: unknownID, VolumePath: staging})
			return err
		}, codes.NotFound},
		{"expand: empty path", func() error {
			_, err := e.nc.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{VolumeId: v.VolumeId})
			return err
		}, codes.InvalidArgument},
	}
	if _, err := os.Stat("/sys/bus/rbd"); err != nil {
		cases = append(cases, struct {
			name string
			call func() error
			want codes.Code
		}{"stage: krbd on a kernel without it", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["mounter"] = "krbd" }), codes.FailedPrecondition})
	}
	if _, err := os.Stat("/sys/module/nbd"); err != nil {
		cases = append(cases, struct {
			name string
			call func() error
			want codes.Code
		}{"stage: nbd on a kernel without it", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext["mounter"] = "nbd" }), codes.FailedPrecondition})
	}

	for _, tc := range cases {
		before, mounts := tree(t, e.dir), mountsUnder(e.dir)
		err := tc.call()
		t.Logf("%s: %v", tc.name, err)
		expectCode(t, err, tc.want, tc.name)
		if strings.Contains(tc.name, "without it") && err != nil && !strings.Contains(err.Error(), "krbd, nbd, fuse") {
			t.Errorf("%s: the error does not name the mounter choices: %v", tc.name, err)
		}
		if after := tree(t, e.dir); !slices.Equal(before, after) {
			t.Errorf("%s changed the files under the test directory:\nbefore %v\nafter  %v", tc.name, before, after)
		}
		if after := mountsUnder(e.dir); !slices.Equal(mounts, after) {
			t.Errorf("%s changed the mounts:\nbefore %v\nafter  %v", tc.name, mounts, after)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Errorf("the file used as a target changed: %q", b)
	}
	if !slices.Contains(mountsUnder(e.dir), foreign+" (tmpfs from tmpfs)") {
		t.Errorf("someone else's mount at %s was taken down", foreign)
	}
}

// tree lists the paths under dir (not inside mounts: a FUSE mount holds
// the image itself), with their type.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var root syscall.Stat_t
	harness.Must(t, syscall.Stat(dir, &root), "stat %s", dir)
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err == nil && st.Dev != root.Dev {
			out = append(out, p+" (mount)")
			return fs.SkipDir
		}
		out = append(out, p+" "+d.Type().String())
		return nil
	})
	harness.Must(t, err, "walk %s", dir)
	return out
}

func clone(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}
