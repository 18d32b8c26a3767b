// Package dr tests disaster recovery on two real Ceph clusters, peered for
// RBD snapshot mirroring with real rbd-mirror daemons
// (scripts/dr-cluster.sh, make dr-test): each site runs the real plugin
// in controller mode with its csi-addons socket, and every step of the
// runbook in docs/disaster-recovery.md goes through the CSI controller
// and the csi-addons replication service, as the csi-addons controller
// would call them. Data is written and read as admin through librbd; the
// tests of what a copy holds (content_test.go) also stage volumes through
// node plugins of each site (the rbd-fuse mapper).
package dr

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	librbd "github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

const mib = 1 << 20

// TestMain fails the run if a test left an image, a trash entry or an
// object of the driver's in either site's pool.
func TestMain(m *testing.M) {
	a, errA := harness.ClusterFromDir(os.Getenv("DR_A_DIR"))
	b, errB := harness.ClusterFromDir(os.Getenv("DR_B_DIR"))
	if errA != nil || errB != nil {
		fmt.Fprintf(os.Stderr, "no two peered sites in the environment (run through make dr-test, scripts/dr-cluster.sh): %v %v\n", errA, errB)
		os.Exit(1)
	}
	code := m.Run()
	for _, c := range []harness.Cluster{a, b} {
		if left := c.PoolLeaks(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the suite left in pool %s of %s:\n  %s\n", c.Pool, c.Dir, strings.Join(left, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// site is one cluster with its plugin.
type site struct {
	name string
	c    harness.Cluster
	cc   csi.ControllerClient
	rep  replication.ControllerClient
	p    *harness.Plugin
}

// sites starts a plugin on each site. Each one's cluster map names the
// other's clusterID among its peers, so a volume ID of either site
// resolves on both.
func sites(t *testing.T) (a, b *site) {
	ca, err := harness.ClusterFromDir(os.Getenv("DR_A_DIR"))
	harness.Must(t, err, "site a")
	cb, err := harness.ClusterFromDir(os.Getenv("DR_B_DIR"))
	harness.Must(t, err, "site b")
	return start(t, "a", ca, cb.ClusterID), start(t, "b", cb, ca.ClusterID)
}

// start starts a plugin on the site, with extra arguments.
func start(t *testing.T, name string, c harness.Cluster, peer string, extra ...string) *site {
	dir := t.TempDir()
	entry := []map[string]any{{"clusterID": c.ClusterID, "monitors": []string{c.MonHost}, "peerClusterIDs": []string{peer}}}
	data, err := json.Marshal(entry)
	harness.Must(t, err, "cluster map")
	c.ConfigFile = filepath.Join(dir, "cluster-config.json")
	harness.Must(t, os.WriteFile(c.ConfigFile, data, 0o600), "cluster map")
	sock := filepath.Join(dir, "csi-addons.sock")
	p := harness.StartPlugin(t, c, append([]string{"--mode", "controller", "--csi-addons-endpoint", "unix://" + sock, "--v", "5"}, extra...)...)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	harness.Must(t, err, "csi-addons connection")
	t.Cleanup(func() { conn.Close() })
	s := &site{name: name, c: c, cc: p.Controller(), rep: replication.NewControllerClient(conn), p: p}
	t.Cleanup(func() {
		if strings.Contains(p.Logs(), c.CSIKey) {
			t.Errorf("site %s: the plugin's log shows the key", name)
		}
	})
	return s
}

func (s *site) secrets() map[string]string { return s.c.Secrets() }

// createVolume makes a volume on the site and returns its ID; the test's
// cleanup removes it, and its copy on the peer, whatever state they are in.
func (s *site) createVolume(t *testing.T, peer *site, name string, size int64) string {
	resp, err := s.cc.CreateVolume(harness.Ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		}},
		Parameters: s.c.Params(), Secrets: s.secrets(),
	})
	harness.Must(t, err, "CreateVolume %s on site %s", name, s.name)
	id := resp.Volume.VolumeId
	image := imageOf(t, id)
	t.Cleanup(func() { removeEverywhere(t, image, s, peer) })
	return id
}

// removeEverywhere removes an image from both sites, mirroring off first
// (forced where a copy is not primary, which only an admin does).
func removeEverywhere(t *testing.T, image string, sites ...*site) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		left := ""
		for _, s := range sites {
			if !s.has(image) {
				continue
			}
			_, _ = s.c.RBD("mirror", "image", "disable", "--force", s.c.Pool+"/"+image)
			_, _ = s.c.RBD("snap", "purge", s.c.Pool+"/"+image)
			if out, err := s.c.RBD("rm", "--no-progress", s.c.Pool+"/"+image); err != nil {
				left = fmt.Sprintf("site %s: %v %s", s.name, err, out)
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cleanup of %s: %s", image, left)
			return
		}
		time.Sleep(time.Second)
	}
}

// has reports whether the site's pool lists the image.
func (s *site) has(image string) bool {
	out, err := s.c.RBD("ls", "-p", s.c.Pool)
	return err == nil && strings.Contains("\n"+out, "\n"+image+"\n")
}

func imageOf(t *testing.T, volumeID string) string {
	parts := strings.Split(volumeID, ":")
	if len(parts) != 4 {
		t.Fatalf("volume ID %q", volumeID)
	}
	return parts[3]
}

// write writes n random bytes at random offsets of the first size bytes
// of the image, as admin through librbd, and returns the sha256 of the
// whole image after.
func (s *site) write(t *testing.T, image string, n, size int) string {
	ioctx, done := s.c.AdminIoctx(t)
	defer done()
	img, err := librbd.OpenImage(ioctx, image, librbd.NoSnapshot)
	harness.Must(t, err, "opening %s on site %s", image, s.name)
	defer img.Close()
	buf := make([]byte, 64*1024)
	for written := 0; written < n; written += len(buf) {
		_, _ = rand.Read(buf)
		var off [4]byte
		_, _ = rand.Read(off[:])
		at := (int64(off[0])<<24 | int64(off[1])<<16 | int64(off[2])<<8 | int64(off[3])) % int64(size-len(buf))
		if _, err := img.WriteAt(buf, at); err != nil {
			t.Fatalf("writing to %s on site %s: %v", image, s.name, err)
		}
	}
	harness.Must(t, img.Flush(), "flushing %s", image)
	return s.sum(t, image)
}

// sum is the sha256 of the image's data, read-only (a non-primary copy
// reads too).
func (s *site) sum(t *testing.T, image string) string {
	ioctx, done := s.c.AdminIoctx(t)
	defer done()
	img, err := librbd.OpenImageReadOnly(ioctx, image, librbd.NoSnapshot)
	harness.Must(t, err, "opening %s on site %s", image, s.name)
	defer img.Close()
	size, err := img.GetSize()
	harness.Must(t, err, "size of %s", image)
	h := sha256.New()
	buf := make([]byte, 4*mib)
	for off := uint64(0); off < size; off += uint64(len(buf)) {
		n, err := img.ReadAt(buf[:min(uint64(len(buf)), size-off)], int64(off))
		harness.Must(t, err, "reading %s on site %s", image, s.name)
		h.Write(buf[:n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// mirrorStatus is `rbd mirror image status` of the image, as admin.
type mirrorStatus struct {
	State       string `json:"state"`
	Description string `json:"description"`
	PeerSites   []struct {
		State       string `json:"state"`
		Description string `json:"description"`
	} `json:"peer_sites"`
}

func (s *site) status(t *testing.T, image string) mirrorStatus {
	st, err := s.statusErr(image)
	harness.Must(t, err, "mirror status of %s on site %s", image, s.name)
	return st
}

// statusErr is status, with its error.
func (s *site) statusErr(image string) (mirrorStatus, error) {
	var st mirrorStatus
	out, err := s.c.RBD("mirror", "image", "status", "--format", "json", s.c.Pool+"/"+image)
	if err == nil {
		err = json.Unmarshal([]byte(out), &st)
	}
	return st, err
}

// primary reports whether the site's copy is primary (rbd info).
func (s *site) primary(t *testing.T, image string) bool {
	out, err := s.c.RBD("info", "--format", "json", s.c.Pool+"/"+image)
	harness.Must(t, err, "rbd info %s on site %s", image, s.name)
	var info struct {
		Mirroring struct {
			Primary bool `json:"primary"`
		} `json:"mirroring"`
	}
	harness.Must(t, json.Unmarshal([]byte(out), &info), "parsing %s", out)
	return info.Mirroring.Primary
}

// imageID is the site's RBD image ID of the image: a resync replaces it.
func (s *site) imageID(t *testing.T, image string) string { return s.c.ImageID(t, image) }

// mirrorSnapshot takes a mirror snapshot of the primary copy, as a
// schedule would, as admin.
func (s *site) mirrorSnapshot(t *testing.T, image string) {
	out, err := s.c.RBD("mirror", "image", "snapshot", s.c.Pool+"/"+image)
	harness.Must(t, err, "mirror snapshot of %s on site %s: %s", image, s.name, out)
}

// eventually polls cond every second until it holds or the time is up,
// and logs how long that took: most of the suite's time is rbd-mirror's.
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		ok, last := cond()
		if ok {
			t.Logf("%s after %.1f s", what, time.Since(start).Seconds())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v (last: %s)", what, within, last)
		}
		time.Sleep(time.Second)
	}
}

// Calls of the replication service, each bounded like a sidecar's.

func (s *site) enable(t *testing.T, id string, params map[string]string) error {
	_, err := s.rep.EnableVolumeReplication(harness.Ctx(t), &replication.EnableVolumeReplicationRequest{VolumeId: id, Parameters: params, Secrets: s.secrets()})
	return err
}

func (s *site) disable(t *testing.T, id string) error {
	_, err := s.rep.DisableVolumeReplication(harness.Ctx(t), &replication.DisableVolumeReplicationRequest{VolumeId: id, Secrets: s.secrets()})
	return err
}

func (s *site) promote(t *testing.T, id string, force bool) error {
	return s.promoteWith(t, id, force, nil)
}

func (s *site) promoteWith(t *testing.T, id string, force bool, params map[string]string) error {
	_, err := s.rep.PromoteVolume(harness.Ctx(t), &replication.PromoteVolumeRequest{VolumeId: id, Force: force, Parameters: params, Secrets: s.secrets()})
	return err
}

func (s *site) demote(t *testing.T, id string) error {
	_, err := s.rep.DemoteVolume(harness.Ctx(t), &replication.DemoteVolumeRequest{VolumeId: id, Secrets: s.secrets()})
	return err
}

func (s *site) resync(t *testing.T, id string, force bool) (bool, error) {
	resp, err := s.rep.ResyncVolume(harness.Ctx(t), &replication.ResyncVolumeRequest{VolumeId: id, Force: force, Secrets: s.secrets()})
	return resp.GetReady(), err
}

func (s *site) info(t *testing.T, id string) (*replication.GetVolumeReplicationInfoResponse, error) {
	return s.rep.GetVolumeReplicationInfo(harness.Ctx(t), &replication.GetVolumeReplicationInfoRequest{VolumeId: id, Secrets: s.secrets()})
}

// promoteWhenArrived promotes the site's copy without force as the
// csi-addons controller does, retrying while the answer is Unavailable
// (the peer's demotion on its way). A FailedPrecondition would make that
// controller force the promote, losing what the demotion carries: in a
// planned relocation it fails the test.
func (s *site) promoteWhenArrived(t *testing.T, id string, params map[string]string) {
	t.Helper()
	eventually(t, "promote on site "+s.name, 2*time.Minute, func() (bool, string) {
		err := s.promoteWith(t, id, false, params)
		switch status.Code(err) {
		case codes.OK:
			return true, ""
		case codes.Unavailable:
			return false, err.Error()
		}
		t.Fatalf("promote on site %s: %v, want OK or Unavailable while the demotion arrives", s.name, err)
		return false, ""
	})
}

// demoteWhenPulled demotes the site's copy as the csi-addons controller
// does, retrying while the answer is Unavailable (no peer replays the
// image yet, and it would not copy the demotion).
func (s *site) demoteWhenPulled(t *testing.T, id string) {
	t.Helper()
	eventually(t, "demote on site "+s.name, 2*time.Minute, func() (bool, string) {
		err := s.demote(t, id)
		switch status.Code(err) {
		case codes.OK:
			return true, ""
		case codes.Unavailable:
			return false, err.Error()
		}
		t.Fatalf("demote on site %s: %v, want OK or Unavailable until a peer replays", s.name, err)
		return false, ""
	})
}

// wantCode fails unless err has the code.
func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

// waitReplaying waits until the site's non-primary copy is in step with
// the primary's last mirror snapshot, as its rbd-mirror reports.
func (s *site) waitReplaying(t *testing.T, image string) {
	t.Helper()
	eventually(t, "site "+s.name+" replaying "+image, 2*time.Minute, func() (bool, string) {
		if !s.has(image) {
			return false, "no copy yet"
		}
		// rbd-mirror creates the copy, then enables its mirroring: for a
		// moment the copy is listed and its status is EINVAL.
		st, err := s.statusErr(image)
		if err != nil {
			return false, err.Error()
		}
		return st.State == "up+replaying" && strings.Contains(st.Description, "local_snapshot_timestamp"), st.State + " " + st.Description
	})
}

// waitData waits until the site's copy reads as sum.
func (s *site) waitData(t *testing.T, image, sum, what string) {
	t.Helper()
	eventually(t, what, 2*time.Minute, func() (bool, string) {
		if !s.has(image) {
			return false, "no copy"
		}
		got := s.sum(t, image)
		return got == sum, got
	})
}

// ctx is a context for a call the test makes itself.
func ctx(t *testing.T) context.Context { return harness.Ctx(t) }
