package controller

import (
	"encoding/binary"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	librbd "github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// groupSnapshotsExpected: librbd has clone-by-snapshot-ID from Squid 19
// on. The release is read from the rbd tool of the same packages as the
// librbd the plugin is built against, not from the plugin.
func groupSnapshotsExpected(t *testing.T) (bool, string) {
	t.Helper()
	out, err := exec.Command("rbd", "--version").Output()
	harness.Must(t, err, "rbd --version")
	m := regexp.MustCompile(`ceph version (\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("rbd --version: %q", out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	return major >= 19, strings.TrimSpace(string(out))
}

// The plugin advertises and serves group snapshots exactly where its
// librbd can restore them: Squid 19 and newer. Before, the service is
// absent altogether.
func TestGroupSnapshotCapability(t *testing.T) {
	e := setup(t)
	want, release := groupSnapshotsExpected(t)
	caps, err := e.p.Identity().GetPluginCapabilities(harness.Ctx(t), &csi.GetPluginCapabilitiesRequest{})
	harness.Must(t, err, "GetPluginCapabilities")
	advertised := false
	for _, cp := range caps.Capabilities {
		advertised = advertised || cp.GetService().GetType() == csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE
	}
	if advertised != want {
		t.Fatalf("GROUP_CONTROLLER_SERVICE advertised: %v, want %v with %s", advertised, want, release)
	}
	gc := e.p.GroupController()
	gcaps, err := gc.GroupControllerGetCapabilities(harness.Ctx(t), &csi.GroupControllerGetCapabilitiesRequest{})
	if !want {
		wantCode(t, err, codes.Unimplemented, "GroupControllerGetCapabilities without group snapshots")
		_, err = gc.CreateVolumeGroupSnapshot(harness.Ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"v"}, Secrets: e.c.Secrets()})
		wantCode(t, err, codes.Unimplemented, "CreateVolumeGroupSnapshot without group snapshots")
		return
	}
	harness.Must(t, err, "GroupControllerGetCapabilities")
	if len(gcaps.Capabilities) != 1 || gcaps.Capabilities[0].GetRpc().GetType() != csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT {
		t.Fatalf("group controller capabilities %v", gcaps.Capabilities)
	}
}

// A group snapshot of three volumes that a writer never stops writing
// shows one single point in time: the writer puts round n's marker on
// volume a, then b, then c, so any one instant holds (n, n, n),
// (n, n-1, n-1) or (n, n, n-1). Three snapshots taken one after the
// other would show rounds far apart. Every member restores, and deleting
// the group snapshot leaves nothing (the package's leak check).
func TestGroupSnapshotIsOnePointInTime(t *testing.T) {
	e := setup(t)
	if want, release := groupSnapshotsExpected(t); !want {
		t.Skipf("librbd lacks group snapshot restores (%s); TestGroupSnapshotCapability checks they are not offered", release)
	}
	var ids, images []string
	for _, n := range []string{"pit-a", "pit-b", "pit-c"} {
		v := e.mustCreate(t, n, 8*mib)
		ids, images = append(ids, v.VolumeId), append(images, imageOf(t, v.VolumeId))
	}
	w := startMarkerWriter(t, e.c, images)
	w.waitRounds(t, 50)
	resp, err := e.p.GroupController().CreateVolumeGroupSnapshot(harness.Ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: "pit-group", SourceVolumeIds: ids, Secrets: e.c.Secrets()})
	harness.Must(t, err, "CreateVolumeGroupSnapshot")
	g := resp.GroupSnapshot
	t.Cleanup(func() {
		_, err := e.p.GroupController().DeleteVolumeGroupSnapshot(harness.Ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshotId, Secrets: e.c.Secrets()})
		harness.Must(t, err, "DeleteVolumeGroupSnapshot")
	})
	at := w.rounds.Load()
	w.waitRounds(t, at+50) // the writer goes on after the snapshot
	w.stop(t)

	bySource := map[string]string{}
	for _, s := range g.Snapshots {
		if s.GroupSnapshotId != g.GroupSnapshotId || !s.ReadyToUse {
			t.Errorf("member %v", s)
		}
		bySource[s.SourceVolumeId] = s.SnapshotId
	}
	var markers []uint64
	for i, id := range ids {
		snap, ok := bySource[id]
		if !ok {
			t.Fatalf("no member for volume %s in %v", id, g.Snapshots)
		}
		restored, err := e.createFrom(t, "pit-restore-"+strconv.Itoa(i), 8*mib, fromSnapshot(snap))
		harness.Must(t, err, "restore member %s", snap)
		t.Cleanup(func() { e.delete(t, restored.VolumeId) })
		markers = append(markers, readMarker(t, e.c, imageOf(t, restored.VolumeId)))
	}
	a, b, c := markers[0], markers[1], markers[2]
	t.Logf("markers in the restores: %v; the writer was at round %d after the snapshot", markers, at)
	if c == 0 || a < b || b < c || a-c > 1 {
		t.Fatalf("the restores hold rounds %v: not one point in time", markers)
	}
	// Deleting a member alone is refused while the group snapshot lives.
	_, err = e.cc.DeleteSnapshot(harness.Ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: g.Snapshots[0].SnapshotId, Secrets: e.c.Secrets()})
	wantCode(t, err, codes.InvalidArgument, "DeleteSnapshot of a group member")
}

// markerWriter writes round numbers to the first bytes of each image in
// turn, through librbd, as another client of the cluster.
type markerWriter struct {
	rounds atomic.Uint64
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func (w *markerWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func startMarkerWriter(t *testing.T, c harness.Cluster, images []string) *markerWriter {
	t.Helper()
	ioctx, closeIoctx := c.AdminIoctx(t)
	var imgs []*librbd.Image
	for _, name := range images {
		img, err := librbd.OpenImage(ioctx, name, librbd.NoSnapshot)
		harness.Must(t, err, "opening %s", name)
		imgs = append(imgs, img)
	}
	w := &markerWriter{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		buf := make([]byte, 512)
		for n := uint64(1); ; n++ {
			select {
			case <-w.done:
				return
			default:
			}
			binary.BigEndian.PutUint64(buf, n)
			for _, img := range imgs {
				if _, err := img.WriteAt(buf, 0); err != nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					return
				}
			}
			w.rounds.Store(n)
		}
	}()
	t.Cleanup(func() {
		w.stop(t)
		for _, img := range imgs {
			img.Close()
		}
		closeIoctx()
	})
	return w
}

func (w *markerWriter) waitRounds(t *testing.T, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); w.rounds.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || w.failed() != nil {
			t.Fatalf("the writer reached round %d of %d: %v", w.rounds.Load(), n, w.failed())
		}
	}
}

func (w *markerWriter) stop(t *testing.T) {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		t.Errorf("writer: %v", err)
	}
}

// readMarker reads the round number at the start of an image.
func readMarker(t *testing.T, c harness.Cluster, image string) uint64 {
	t.Helper()
	ioctx, closeIoctx := c.AdminIoctx(t)
	defer closeIoctx()
	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
	harness.Must(t, err, "opening %s", image)
	defer img.Close()
	buf := make([]byte, 8)
	_, err = img.ReadAt(buf, 0)
	harness.Must(t, err, "reading %s", image)
	return binary.BigEndian.Uint64(buf)
}
