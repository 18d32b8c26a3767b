package node

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

const testKey = "AQBexampleexampleexampleexampleexampleA=="

// fakeMapper maps to a made-up device and records what it was asked.
type fakeMapper struct {
	mu          sync.Mutex
	unsupported error
	mapErr      error
	unmapErr    error
	mapped      map[string]string // image -> device
	maps        []mapper.MapRequest
	unmaps      []mapper.UnmapRequest
}

func (f *fakeMapper) Supported(context.Context) error { return f.unsupported }
func (f *fakeMapper) Map(_ context.Context, req mapper.MapRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maps = append(f.maps, req)
	if f.mapErr != nil {
		return "", f.mapErr
	}
	if f.mapped == nil {
		f.mapped = map[string]string{}
	}
	f.mapped[req.Image.String()] = "/dev/fake0"
	return "/dev/fake0", nil
}
func (f *fakeMapper) Unmap(_ context.Context, req mapper.UnmapRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unmaps = append(f.unmaps, req)
	if f.unmapErr != nil {
		return f.unmapErr
	}
	delete(f.mapped, req.Image.String())
	return nil
}
func (f *fakeMapper) List(context.Context) ([]mapper.Mapped, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []mapper.Mapped
	for img, dev := range f.mapped {
		pool, name, _ := strings.Cut(img, "/")
		out = append(out, mapper.Mapped{Image: mapper.Image{Pool: pool, Name: name}, Device: dev})
	}
	return out, nil
}
func (f *fakeMapper) Refresh(context.Context, string, int64) (int64, error) { return 0, nil }

// fakeRun answers blkid from a script and records everything it runs.
type fakeRun struct {
	mu     sync.Mutex
	calls  [][]string
	blkid  func() ([]byte, error)
	fstrim func(path string) ([]byte, error)
}

func (f *fakeRun) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, append([]string{name}, args...))
	f.mu.Unlock()
	if name == "blkid" && f.blkid != nil {
		return f.blkid()
	}
	if name == "fstrim" && f.fstrim != nil {
		return f.fstrim(args[len(args)-1])
	}
	return nil, nil
}

func (f *fakeRun) ran(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.calls, func(c []string) bool { return c[0] == name })
}

// blkidEmpty is blkid's answer for a device with nothing on it: exit 2.
func blkidEmpty() ([]byte, error) {
	return nil, exec.Command("sh", "-c", "exit 2").Run()
}

type fixture struct {
	n       *Node
	m       *fakeMapper
	run     *fakeRun
	mounter *mount.FakeMounter
	state   string
	dir     string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{m: &fakeMapper{}, run: &fakeRun{}, mounter: mount.NewFakeMounter(nil), state: t.TempDir(), dir: t.TempDir()}
	n, err := New(Options{
		NodeID: "n1", Mappers: map[string]mapper.Mapper{"fuse": f.m, "krbd": &fakeMapper{}}, DefaultMounter: "fuse",
		Mounter: f.mounter, Runner: f.run, StateDir: f.state, MaxVolumesPerNode: 7,
		Clusters: cluster.NewStaticMap([]cluster.Cluster{{ClusterID: "c1", Monitors: []string{"v2:10.0.0.1:3300"}}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.n = n
	return f
}

const volID = "v1:c1:rbd:csi-vol-0123456789abcdef0123"

func (f *fixture) stageReq(c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{
		VolumeId: volID, StagingTargetPath: filepath.Join(f.dir, "staging"), VolumeCapability: c,
		VolumeContext: map[string]string{"clusterID": "c1", "pool": "rbd"},
		Secrets:       map[string]string{"userID": "csi-rbd", "userKey": testKey},
	}
}

func fsCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}
}

var rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

// expectNothingLeft: no record, nothing mapped, no staging directory.
func (f *fixture) expectNothingLeft(t *testing.T) {
	t.Helper()
	if rec, err := f.n.store.load(volID); rec != nil || err != nil {
		t.Errorf("record left: %+v %v", rec, err)
	}
	if list, _ := f.m.List(context.Background()); len(list) > 0 {
		t.Errorf("mapping left: %v", list)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "staging")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging path created: %v", err)
	}
}

func TestInfoAndCapabilities(t *testing.T) {
	f := newFixture(t)
	info, _ := f.n.NodeGetInfo(context.Background(), nil)
	if info.NodeId != "n1" || info.MaxVolumesPerNode != 7 || info.AccessibleTopology != nil {
		t.Errorf("info %v", info)
	}
	caps, _ := f.n.NodeGetCapabilities(context.Background(), nil)
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range caps.Capabilities {
		got = append(got, c.GetRpc().GetType())
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME, csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("capability %v missing", want)
		}
	}
	if _, err := New(Options{NodeID: "n", Mappers: map[string]mapper.Mapper{}, DefaultMounter: "krbd", StateDir: t.TempDir()}); err == nil {
		t.Errorf("New accepted a default mounter it has no mapper for")
	}
}

func TestStageUnsupportedMapper(t *testing.T) {
	f := newFixture(t)
	f.m.unsupported = errors.Join(mapper.ErrUnsupported, errors.New("no /dev/fuse"))
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("stage with an unsupported mapper: %v", err)
	}
	if len(f.m.maps) != 0 {
		t.Errorf("mapped anyway")
	}
	f.expectNothingLeft(t)
}

func TestStageMapFailureLeavesNothing(t *testing.T) {
	f := newFixture(t)
	f.m.mapErr = errors.Join(mapper.ErrNotFound, errors.New("no such image"))
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.NotFound {
		t.Errorf("stage of a missing image: %v", err)
	}
	f.expectNothingLeft(t)
}

func TestStageRefusesForeignFilesystem(t *testing.T) {
	f := newFixture(t)
	f.run.blkid = func() ([]byte, error) { return []byte("DEVNAME=/dev/fake0\nTYPE=xfs\n"), nil }
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "holds xfs") {
		t.Errorf("stage ext4 over xfs: %v", err)
	}
	if f.run.ran("mkfs.ext4") || len(f.m.unmaps) != 1 {
		t.Errorf("formatted (%v) or not unmapped (%v)", f.run.calls, f.m.unmaps)
	}
	f.expectNothingLeft(t)

	f.run.blkid = func() ([]byte, error) { return []byte("PTTYPE=gpt\n"), nil }
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo))); status.Code(err) != codes.FailedPrecondition || f.run.ran("mkfs.ext4") {
		t.Errorf("stage over a partition table: %v", err)
	}
}

func TestStageNeverFormatsReadOnly(t *testing.T) {
	f := newFixture(t)
	f.run.blkid = blkidEmpty
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)))
	if status.Code(err) != codes.FailedPrecondition || f.run.ran("mkfs.ext4") {
		t.Errorf("read-only stage of an empty volume: %v (ran %v)", err, f.run.calls)
	}
	if len(f.m.maps) != 1 || !f.m.maps[0].ReadOnly {
		t.Errorf("a reader-only volume was not mapped read-only: %+v", f.m.maps)
	}
	f.expectNothingLeft(t)
}

// mkfs options are held against the allow-list of the filesystem being
// made before anything is mapped.
func TestStageRefusesMkfsOptionsOffTheAllowList(t *testing.T) {
	for _, c := range []struct{ fs, opts string }{
		{"ext4", "-d /var/lib/kubelet/pods"},
		{"ext4", "-K"}, // xfs's
		{"xfs", "-f -l logdev=/dev/sda,size=64m"},
	} {
		f := newFixture(t)
		f.run.blkid = blkidEmpty
		capab := fsCap(rwo)
		capab.GetMount().FsType = c.fs
		req := f.stageReq(capab)
		req.VolumeContext["mkfsOptions"] = c.opts
		_, err := f.n.NodeStageVolume(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mkfs."+c.fs) {
			t.Errorf("%s %q: %v, want InvalidArgument naming mkfs.%s", c.fs, c.opts, err, c.fs)
		}
		if len(f.m.maps) != 0 || f.run.ran("mkfs."+c.fs) {
			t.Errorf("%s %q: mapped %v, ran %v", c.fs, c.opts, f.m.maps, f.run.calls)
		}
	}
}

// Mount flags off the filesystem's allow-list, and map options that
// switch off signatures or CRCs (without --allow-insecure-map-options),
// are refused before anything is mapped.
func TestStageRefusesUnsafeMountAndMapOptions(t *testing.T) {
	for _, c := range []struct{ flag, mapOpts, want string }{
		{flag: "journal_path=/dev/sda", want: "names a device of the node"},
		{flag: "errors=panic", want: "take the whole node down"},
		{mapOpts: "fuse:;krbd:nocrc", want: "--allow-insecure-map-options"},
		{mapOpts: "nocephx_sign_messages", want: "--allow-insecure-map-options"},
	} {
		f := newFixture(t)
		f.run.blkid = blkidEmpty
		capab := fsCap(rwo)
		if c.flag != "" {
			capab.GetMount().MountFlags = []string{"noatime", c.flag}
		}
		req := f.stageReq(capab)
		if c.mapOpts != "" {
			req.VolumeContext["mapOptions"] = c.mapOpts
		}
		_, err := f.n.NodeStageVolume(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want InvalidArgument saying %q", c, err, c.want)
		}
		if len(f.m.maps) != 0 || f.run.ran("mkfs.ext4") {
			t.Errorf("%+v: mapped %v, ran %v", c, f.m.maps, f.run.calls)
		}
	}
}

func TestStageFormatsEmptyDevice(t *testing.T) {
	f := newFixture(t)
	f.run.blkid = blkidEmpty
	req := f.stageReq(fsCap(rwo))
	req.VolumeContext["mkfsOptions"] = "-m1 -E nodiscard"
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(f.run.calls, func(c []string) bool {
		return slices.Equal(c, []string{"mkfs.ext4", "-m1", "-E", "nodiscard", "/dev/fake0"})
	}) {
		t.Errorf("mkfs not run as asked: %v", f.run.calls)
	}
	mounts, _ := f.mounter.List()
	if len(mounts) != 1 || mounts[0].Device != "/dev/fake0" || mounts[0].Path != req.StagingTargetPath || mounts[0].Type != "ext4" {
		t.Errorf("mounts %+v", mounts)
	}
	rec, err := f.n.store.load(volID)
	if err != nil || rec == nil || !rec.Staged || rec.Device != "/dev/fake0" || rec.Mounter != "fuse" {
		t.Fatalf("record %+v %v", rec, err)
	}
	b, _ := os.ReadFile(f.n.store.path(volID))
	st, _ := os.Stat(f.n.store.path(volID))
	if strings.Contains(string(b), testKey) || st.Mode().Perm() != 0o600 {
		t.Errorf("record holds the key or is not 0600 (%v):\n%s", st.Mode(), b)
	}
	if f.m.maps[0].Cred.Key != testKey || f.m.maps[0].MonHost != "v2:10.0.0.1:3300" {
		t.Errorf("map request %+v", f.m.maps[0])
	}
	// The same volume with another capability is a conflict.
	other := f.stageReq(fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER))
	if _, err := f.n.NodeStageVolume(context.Background(), other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("stage with another capability: %v", err)
	}
}

func TestBusyVolumeIsAborted(t *testing.T) {
	f := newFixture(t)
	release, _ := f.n.locks.TryLock("vol/" + volID)
	defer release()
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.Aborted {
		t.Errorf("stage of a busy volume: %v", err)
	}
	_, err = f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: "/x"})
	if status.Code(err) != codes.Aborted {
		t.Errorf("unstage of a busy volume: %v", err)
	}
}

func TestUnstageWithoutRecord(t *testing.T) {
	f := newFixture(t)
	_, err := f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: filepath.Join(f.dir, "s")})
	if err != nil || len(f.m.unmaps) != 0 {
		t.Errorf("unstage of a volume never staged: %v, unmaps %v", err, f.m.unmaps)
	}
	_, err = f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: "garbage", StagingTargetPath: "/x"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unstage of a malformed ID: %v", err)
	}
}

// A mapping that fails as old Ceph tools and kernels fail on an AES256K key
// says what to do; with an AES key, or another failure, it stays as it was.
func TestStageWithUnusableKeyTypeSaysWhy(t *testing.T) {
	aes256k := base64.StdEncoding.EncodeToString(append([]byte{2, 0}, make([]byte, 44)...))
	einval := errors.New("rbd: map failed: (22) Invalid argument")
	for _, tc := range []struct {
		name string
		key  string
		err  error
		code codes.Code
		hint bool
	}{
		{"AES256K key, EINVAL", aes256k, einval, codes.InvalidArgument, true},
		{"AES key, EINVAL", testKey, einval, codes.Internal, false},
		{"AES256K key, missing image", aes256k, errors.Join(mapper.ErrNotFound, errors.New("image not found")), codes.NotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.m.mapErr = tc.err
			req := f.stageReq(fsCap(rwo))
			req.Secrets["userKey"] = tc.key
			_, err := f.n.NodeStageVolume(context.Background(), req)
			if status.Code(err) != tc.code || strings.Contains(err.Error(), "AES256K key") != tc.hint {
				t.Errorf("got %v, want %s with hint %v", err, tc.code, tc.hint)
			}
			f.expectNothingLeft(t)
		})
	}
}

// A stage whose secrets name no Ceph user maps as the node's own user
// (--node-secret-dir); without one it is refused, naming the flag, and
// nothing is mapped. Secrets that name a user win over the node's own.
func TestStageUsesTheNodesOwnUser(t *testing.T) {
	f := newFixture(t)
	f.run.blkid = blkidEmpty
	req := f.stageReq(fsCap(rwo))
	req.Secrets = nil
	_, err := f.n.NodeStageVolume(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--node-secret-dir") {
		t.Fatalf("stage with no secrets and no user of its own: %v, want InvalidArgument naming --node-secret-dir", err)
	}
	f.expectNothingLeft(t)

	f.n.cred = &cluster.Credentials{ID: "node-user", Key: testKey}
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatalf("stage with no secrets, as the node's own user: %v", err)
	}
	if len(f.m.maps) != 1 || f.m.maps[0].Cred.ID != "node-user" {
		t.Fatalf("maps %v, want one, as node-user", f.m.maps)
	}

	g := newFixture(t)
	g.run.blkid = blkidEmpty
	g.n.cred = &cluster.Credentials{ID: "node-user", Key: testKey}
	if _, err := g.n.NodeStageVolume(context.Background(), g.stageReq(fsCap(rwo))); err != nil {
		t.Fatal(err)
	}
	if len(g.m.maps) != 1 || g.m.maps[0].Cred.ID != "csi-rbd" {
		t.Fatalf("maps %v, want one as the secrets' user", g.m.maps)
	}
}
