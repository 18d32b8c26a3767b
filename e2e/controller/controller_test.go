// Package controller tests the Controller service of the real plugin on the
// real local Ceph cluster: idempotency, conflicts, concurrency, crash
// completion, pagination, capacity, expansion, in-use deletion, bad input.
package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

const mib = 1 << 20

type env struct {
	c  harness.Cluster
	p  *harness.Plugin
	cc csi.ControllerClient
}

func setup(t *testing.T) env {
	c := harness.LoadCluster(t)
	p := harness.StartPlugin(t, c, "--mode", "controller", "--controller-secret-dir", harness.WriteControllerSecretDir(t, c))
	t.Cleanup(func() { c.ExpectNoImages(t) })
	return env{c: c, p: p, cc: p.Controller()}
}

func fsCap() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	}}
}

func (e env) create(t *testing.T, name string, size int64) (*csi.CreateVolumeResponse, error) {
	return e.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: fsCap(), Parameters: e.c.Params(), Secrets: e.c.Secrets(),
	})
}

func (e env) mustCreate(t *testing.T, name string, size int64) *csi.Volume {
	t.Helper()
	resp, err := e.create(t, name, size)
	harness.Must(t, err, "CreateVolume %s", name)
	t.Cleanup(func() { e.delete(t, resp.Volume.VolumeId) })
	return resp.Volume
}

func (e env) delete(t *testing.T, id string) {
	t.Helper()
	_, err := e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.c.Secrets()})
	harness.Must(t, err, "DeleteVolume %s", id)
}

func imageOf(t *testing.T, volumeID string) string {
	parts := strings.Split(volumeID, ":")
	if len(parts) != 4 {
		t.Fatalf("volume ID %q does not have 4 parts", volumeID)
	}
	return parts[3]
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

func TestCreateIsIdempotentAndDetectsConflicts(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "idem", 5*mib+1)
	if v.CapacityBytes != 6*mib {
		t.Fatalf("capacity %d, want rounded up to 6 MiB", v.CapacityBytes)
	}
	if len(v.VolumeId) > 128 {
		t.Fatalf("volume ID is %d bytes", len(v.VolumeId))
	}
	for i := 0; i < 3; i++ {
		again, err := e.create(t, "idem", 6*mib)
		harness.Must(t, err, "repeat CreateVolume")
		if again.Volume.VolumeId != v.VolumeId || again.Volume.CapacityBytes != v.CapacityBytes {
			t.Fatalf("repeat returned %+v, first %+v", again.Volume, v)
		}
	}
	_, err := e.create(t, "idem", 100*mib)
	wantCode(t, err, codes.AlreadyExists, "same name, larger size")
	if imgs := e.c.Images(t); len(imgs) != 1 {
		t.Fatalf("images after repeats: %v", imgs)
	}
	out, err := e.c.RBD("image-meta", "get", e.c.Pool+"/"+imageOf(t, v.VolumeId), "rbdcsi.name")
	if err != nil || strings.TrimSpace(out) != "idem" {
		t.Fatalf("image metadata rbdcsi.name = %q, %v", out, err)
	}
	out, err = e.c.RBD("info", "--format", "json", e.c.Pool+"/"+imageOf(t, v.VolumeId))
	if err != nil || !strings.Contains(out, `"features":["layering","exclusive-lock","object-map","fast-diff","deep-flatten"]`) {
		t.Fatalf("default features should be the full set: %s %v", out, err)
	}
}

func TestConcurrentCreatesMakeOneImagePerName(t *testing.T) {
	e := setup(t)
	const names, callers = 16, 64
	var wg sync.WaitGroup
	ids := make([][]string, names)
	var mu sync.Mutex
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			n := i % names
			// A first connection may take a second or more (Tentacle's
			// key-type probe, a slow monitor): retry for up to 30 s.
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				resp, err := e.create(t, fmt.Sprintf("conc-%d", n), 10*mib)
				if status.Code(err) == codes.Aborted {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("CreateVolume conc-%d: %v", n, err)
					return
				}
				mu.Lock()
				ids[n] = append(ids[n], resp.Volume.VolumeId)
				mu.Unlock()
				return
			}
			t.Errorf("conc-%d: still Aborted after 30 s", n)
		}(i)
	}
	wg.Wait()
	for n, got := range ids {
		for _, id := range got {
			if id != got[0] {
				t.Errorf("name conc-%d got two IDs: %v", n, got)
			}
		}
		if len(got) > 0 {
			e.delete(t, got[0])
		}
	}
	if imgs := e.c.Images(t); len(imgs) != 0 {
		t.Fatalf("left after deleting one volume per name: %v", imgs)
	}
}

// Concurrent Delete, Expand and Publish-free calls on one volume: each
// either runs or is told at once that another is in progress; none hangs.
func TestConcurrentCallsOnOneVolume(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "one-vol", 8*mib)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := harness.Ctx(t)
			var err error
			switch i % 3 {
			case 0:
				_, err = e.cc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
					CapacityRange: &csi.CapacityRange{RequiredBytes: int64(16+i) * mib}, Secrets: e.c.Secrets()})
			case 1:
				_, err = e.cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("one-vol-snap-%d", i), SourceVolumeId: v.VolumeId, Secrets: e.c.Secrets()})
			case 2:
				_, err = e.cc.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: v.VolumeId})
			}
			mu.Lock()
			codesSeen[status.Code(err)]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	for code := range codesSeen {
		if code != codes.OK && code != codes.Aborted {
			t.Fatalf("unexpected outcome %v (all: %v)", code, codesSeen)
		}
	}
	if codesSeen[codes.OK] == 0 {
		t.Fatalf("no call ran: %v", codesSeen)
	}
	t.Logf("outcomes: %v", codesSeen)
	snaps, err := e.cc.ListSnapshots(harness.Ctx(t), &csi.ListSnapshotsRequest{SourceVolumeId: v.VolumeId, Secrets: e.c.Secrets()})
	harness.Must(t, err, "ListSnapshots")
	for _, s := range snaps.Entries {
		_, err := e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: s.Snapshot.SnapshotId, Secrets: e.c.Secrets()})
		harness.Must(t, err, "DeleteSnapshot")
	}
	// Concurrent deletes: one removes, the others are Aborted or find it gone.
	var dwg sync.WaitGroup
	for i := 0; i < 8; i++ {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			_, err := e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: e.c.Secrets()})
			if c := status.Code(err); c != codes.OK && c != codes.Aborted {
				t.Errorf("concurrent DeleteVolume: %v", err)
			}
		}()
	}
	dwg.Wait()
}

// A crash between creating the image and setting its metadata leaves an
// image without the request name; the retry must finish the job.
func TestRetryCompletesHalfMadeImage(t *testing.T) {
	e := setup(t)
	image := e.c.VolumeImage("half-made")
	if out, err := e.c.RBD("create", "--size", "3", e.c.Pool+"/"+image); err != nil {
		t.Fatalf("rbd create: %v: %s", err, out)
	}
	v := e.mustCreate(t, "half-made", 20*mib)
	if imageOf(t, v.VolumeId) != image || v.CapacityBytes != 20*mib {
		t.Fatalf("got %+v, want image %s of 20 MiB", v, image)
	}
	out, err := e.c.RBD("info", "--format", "json", e.c.Pool+"/"+image)
	if err != nil || !strings.Contains(out, `"size":20971520`) {
		t.Fatalf("image after completion: %s %v", out, err)
	}
	out, err = e.c.RBD("image-meta", "get", e.c.Pool+"/"+image, "rbdcsi.name")
	if err != nil || strings.TrimSpace(out) != "half-made" {
		t.Fatalf("metadata after completion: %q %v", out, err)
	}
}

func TestListVolumesPaginates(t *testing.T) {
	e := setup(t)
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		want[e.mustCreate(t, fmt.Sprintf("page-%d", i), mib).VolumeId] = true
	}
	seen := map[string]bool{}
	token := ""
	pages := 0
	for {
		resp, err := e.cc.ListVolumes(harness.Ctx(t), &csi.ListVolumesRequest{MaxEntries: 3, StartingToken: token})
		harness.Must(t, err, "ListVolumes")
		if len(resp.Entries) > 3 {
			t.Fatalf("page of %d entries, max 3", len(resp.Entries))
		}
		for _, en := range resp.Entries {
			if seen[en.Volume.VolumeId] {
				t.Fatalf("volume %s listed twice", en.Volume.VolumeId)
			}
			seen[en.Volume.VolumeId] = true
			if en.Volume.CapacityBytes != mib {
				t.Fatalf("listed capacity %d", en.Volume.CapacityBytes)
			}
		}
		pages++
		if token = resp.NextToken; token == "" {
			break
		}
	}
	if pages != 3 || len(seen) != len(want) {
		t.Fatalf("%d pages, %d volumes; want 3 pages, %d volumes", pages, len(seen), len(want))
	}
	_, err := e.cc.ListVolumes(harness.Ctx(t), &csi.ListVolumesRequest{StartingToken: "not-a-token"})
	wantCode(t, err, codes.Aborted, "bad token")
	_, err = e.cc.ListVolumes(harness.Ctx(t), &csi.ListVolumesRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument, "negative max entries")
}

func TestCapacityComesFromCeph(t *testing.T) {
	e := setup(t)
	resp, err := e.cc.GetCapacity(harness.Ctx(t), &csi.GetCapacityRequest{Parameters: e.c.Params()})
	harness.Must(t, err, "GetCapacity")
	if resp.AvailableCapacity <= 0 || resp.AvailableCapacity > 64<<30 {
		t.Fatalf("available capacity %d is not the test pool's", resp.AvailableCapacity)
	}
	_, err = e.cc.GetCapacity(harness.Ctx(t), &csi.GetCapacityRequest{Parameters: e.c.Params("pool", "nosuchpool")})
	wantCode(t, err, codes.InvalidArgument, "missing pool")
}

func TestExpand(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "grow", 10*mib)
	resp, err := e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 30 * mib}, Secrets: e.c.Secrets(),
		VolumeCapability: fsCap()[0],
	})
	harness.Must(t, err, "expand")
	if resp.CapacityBytes != 30*mib || !resp.NodeExpansionRequired {
		t.Fatalf("expand: %+v", resp)
	}
	// Shrinking is a no-op that reports the real size.
	resp, err = e.cc.ControllerExpandVolume(harness.Ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 * mib}, Secrets: e.c.Secrets(),
	})
	harness.Must(t, err, "shrink")
	if resp.CapacityBytes != 30*mib {
		t.Fatalf("shrink changed the size: %+v", resp)
	}
	got, err := e.cc.ControllerGetVolume(harness.Ctx(t), &csi.ControllerGetVolumeRequest{VolumeId: v.VolumeId})
	harness.Must(t, err, "ControllerGetVolume")
	if got.Volume.CapacityBytes != 30*mib {
		t.Fatalf("ControllerGetVolume size %d", got.Volume.CapacityBytes)
	}
}

// A volume a client holds open (as a mapped volume on a node does) must not
// be deleted under it.
func TestDeleteInUseIsRefused(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "busy", 4*mib)
	ctx, cancel := context.WithCancel(context.Background())
	watch := exec.CommandContext(ctx, "rbd", "-c", e.c.Conf, "--id", "admin", "watch", e.c.Pool+"/"+imageOf(t, v.VolumeId))
	watch.Stdout, watch.Stderr = os.Stderr, os.Stderr
	stdin, err := watch.StdinPipe() // rbd watch runs until its stdin gets a line
	harness.Must(t, err, "stdin pipe")
	defer stdin.Close()
	harness.Must(t, watch.Start(), "rbd watch")
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := e.c.RBD("status", e.c.Pool+"/"+imageOf(t, v.VolumeId))
		if strings.Contains(out, "watcher=") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rbd watch never registered: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err = e.cc.DeleteVolume(harness.Ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.VolumeId, Secrets: e.c.Secrets()})
	wantCode(t, err, codes.FailedPrecondition, "delete while watched")
	if imgs := e.c.Images(t); len(imgs) != 1 {
		t.Fatalf("the in-use image was removed: %v", imgs)
	}
	// A newline makes rbd watch unwatch and exit; a kill would leave the
	// watch registered until the OSD times it out (30 s).
	_, _ = stdin.Write([]byte("\n"))
	_ = watch.Wait()
}

func TestBadInput(t *testing.T) {
	e := setup(t)
	ctx := harness.Ctx(t)
	secrets, params := e.c.Secrets(), e.c.Params()
	with := func(extra ...string) map[string]string { return e.c.Params(extra...) }
	creates := map[string]struct {
		req  *csi.CreateVolumeRequest
		code codes.Code
	}{
		"no name":         {&csi.CreateVolumeRequest{VolumeCapabilities: fsCap(), Parameters: params, Secrets: secrets}, codes.InvalidArgument},
		"huge name":       {&csi.CreateVolumeRequest{Name: strings.Repeat("n", 10000), VolumeCapabilities: fsCap(), Parameters: params, Secrets: secrets}, codes.InvalidArgument},
		"no caps":         {&csi.CreateVolumeRequest{Name: "bad", Parameters: params, Secrets: secrets}, codes.InvalidArgument},
		"key, no user":    {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: params, Secrets: map[string]string{"userKey": e.c.CSIKey}}, codes.InvalidArgument},
		"no key":          {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: params, Secrets: map[string]string{"userID": e.c.CSIUser}}, codes.InvalidArgument},
		"wrong key":       {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: params, Secrets: map[string]string{"userID": e.c.CSIUser, "userKey": "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="}}, codes.PermissionDenied},
		"unknown cluster": {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: with("clusterID", "nosuch"), Secrets: secrets}, codes.InvalidArgument},
		"no pool":         {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: map[string]string{"clusterID": e.c.ClusterID}, Secrets: secrets}, codes.InvalidArgument},
		"missing pool":    {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: with("pool", "nosuchpool"), Secrets: secrets}, codes.InvalidArgument},
		"bad features":    {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: with("imageFeatures", "journaling"), Secrets: secrets}, codes.InvalidArgument},
		"negative size":   {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: params, Secrets: secrets, CapacityRange: &csi.CapacityRange{RequiredBytes: -5}}, codes.InvalidArgument},
		"absurd size":     {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: params, Secrets: secrets, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 62}}, codes.OutOfRange},
		"shell pool":      {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: with("pool", "rbd;rm -rf /"), Secrets: secrets}, codes.InvalidArgument},
		"shell options":   {&csi.CreateVolumeRequest{Name: "bad", VolumeCapabilities: fsCap(), Parameters: with("mapOptions", "$(reboot)"), Secrets: secrets}, codes.InvalidArgument},
		"rwx filesystem": {&csi.CreateVolumeRequest{Name: "bad", Parameters: params, Secrets: secrets, VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		}}}, codes.InvalidArgument},
	}
	for name, tc := range creates {
		_, err := e.cc.CreateVolume(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("CreateVolume %s: got %v, want %v", name, err, tc.code)
		}
		if err != nil && strings.Contains(err.Error(), e.c.CSIKey) {
			t.Errorf("CreateVolume %s: the error shows the key", name)
		}
	}
	malformed := []string{"x", strings.Repeat("v", 10*1024), "../../etc/passwd", "v1:a:b:c\x00", "v9:" + e.c.ClusterID + ":rbd:csi-vol-00", "v1:" + e.c.ClusterID + ":rbd:../x"}
	for _, id := range malformed {
		if _, err := e.cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}); err != nil {
			t.Errorf("DeleteVolume(%.30q) = %v, want success", id, err)
		}
		_, err := e.cc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: mib}, Secrets: secrets})
		wantCode(t, err, codes.NotFound, "expand malformed "+id[:min(len(id), 20)])
		_, err = e.cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: fsCap(), Secrets: secrets})
		wantCode(t, err, codes.NotFound, "validate malformed")
		_, err = e.cc.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
		wantCode(t, err, codes.NotFound, "get malformed")
	}
	_, err := e.cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{Secrets: secrets})
	wantCode(t, err, codes.InvalidArgument, "delete without ID")
	if imgs := e.c.Images(t); len(imgs) != 0 {
		t.Fatalf("bad input created images: %v", imgs)
	}
}

// TestMain fails the run if the suite left anything in the pool. With
// $RBDCSI_E2E_AGENT_LISTEN set it runs no test but serves the agent there
// (harness.ServeAgent): guest A's part in the kernel test's joint phase,
// writing its address to $RBDCSI_E2E_AGENT_READY once it listens.
func TestMain(m *testing.M) {
	if addr := os.Getenv("RBDCSI_E2E_AGENT_LISTEN"); addr != "" {
		if err := harness.ServeAgent(addr, os.Getenv("RBDCSI_E2E_AGENT_READY")); err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(harness.CheckPoolAfter(m))
}

// An interrupted removal leaves an image listed in the pool directory but
// without its header; deleting the volume again must finish the job.
func TestDeleteCompletesHalfRemovedImage(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "half-removed", 8*mib)
	e.c.RemoveHeader(t, imageOf(t, v.VolumeId))
	e.delete(t, v.VolumeId)
	if imgs := e.c.Images(t); len(imgs) != 0 {
		t.Fatalf("a half-removed image is still listed: %v", imgs)
	}
}

// A cluster-map entry naming a RADOS namespace that was never made: the
// create says so (InvalidArgument, naming the namespace) and makes nothing.
func TestCreateInMissingNamespace(t *testing.T) {
	c := harness.LoadCluster(t).InNamespace(t, "never-made")
	p := harness.StartPlugin(t, c, "--mode", "controller")
	_, err := p.Controller().CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: "in-missing-ns", VolumeCapabilities: fsCap(), Parameters: c.Params(), Secrets: c.Secrets(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: mib},
	})
	wantCode(t, err, codes.InvalidArgument, "a create in a missing namespace")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"never-made"`) || !strings.Contains(msg, "radosNamespace") {
		t.Errorf("the message does not name the namespace and the setting: %s", msg)
	}
}
