package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// A refusal by Ceph, of the attachment read or of the map, is
// PermissionDenied, as the controller answers one, and keeps the words
// that name the user and the caps; nothing of the stage stays.
func TestStageRefusalsArePermissionDenied(t *testing.T) {
	vol, err := volid.DecodeVolume(volID)
	if err != nil {
		t.Fatal(err)
	}
	p := rbd.Pool{Name: "rbd", Cred: cluster.Credentials{ID: "csi-rbd"}}
	n := &Node{id: "n1", fence: stubFence{err: rbd.RefusedOn(p, fmt.Errorf("opening image: %w", rbd.ErrPermission))}}
	err = n.checkAttached(context.Background(), vol, cluster.Cluster{ClusterID: "c1"}, p.Cred, "SINGLE_NODE_WRITER")
	wantWords(t, err, codes.PermissionDenied, "reading the attachments of volume", "Ceph refused client.csi-rbd on pool rbd", cluster.CapRBD("", "rbd"))

	f := newFixture(t)
	f.m.mapErr = &cluster.Refused{User: "csi-rbd", On: "pool rbd", Need: cluster.CapRBD("", "rbd"), Err: fmt.Errorf("%w: rbd: map failed: (1) Operation not permitted", mapper.ErrPermission)}
	_, err = f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	wantWords(t, err, codes.PermissionDenied, "Ceph refused client.csi-rbd on pool rbd", cluster.CapsDoc)
	f.expectNothingLeft(t)
}

// The state store's errors name the file or directory and what to check.
func TestStoreErrorsSayWhatToCheck(t *testing.T) {
	s, _ := newStore(t.TempDir())
	id := "v1:c1:rbd:csi-vol-2"
	for content, want := range map[string]string{
		"{not json": "unmount the volume's staging path, unmap its device and remove the file by hand",
		`{"version": 99, "volumeID": "v1:c1:rbd:csi-vol-2"}`: "a newer plugin staged it",
		`{"version": 1, "volumeID": "v1:c1:rbd:csi-vol-3"}`:  "belongs to volume v1:c1:rbd:csi-vol-3",
	} {
		if err := os.WriteFile(s.path(id), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.load(id)
		if err == nil || !strings.Contains(err.Error(), s.path(id)) || !strings.Contains(err.Error(), want) {
			t.Errorf("record %q: %v, want the file and %q", content, err, want)
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	err := s.save(&record{VolumeID: id})
	if err == nil || !strings.Contains(err.Error(), s.dir+", under the node plugin's --state-dir, must be writable") {
		t.Errorf("save into a missing directory: %v", err)
	}
}

// A path the node cannot use says which step, which path and what is
// likely wrong: a dead FUSE mount, a full or read-only filesystem.
func TestPathErrorsSayWhatToCheck(t *testing.T) {
	for errno, want := range map[unix.Errno]string{
		unix.ENOTCONN: "a FUSE mount there lost its server",
		unix.EROFS:    "read-only or full",
		unix.EIO:      "the kubelet's directory",
	} {
		err := pathStatus("creating the target directory", "/var/lib/kubelet/pods/x/mount", &os.PathError{Op: "mkdir", Path: "/var/lib/kubelet/pods/x/mount", Err: errno})
		wantWords(t, err, codes.Internal, "creating the target directory /var/lib/kubelet/pods/x/mount", want)
	}
	err := mountCheckFailed("/staging", &os.PathError{Op: "lstat", Path: "/staging", Err: unix.ENOTCONN})
	if !errors.Is(err, unix.ENOTCONN) || !strings.Contains(err.Error(), "checking what is mounted at /staging") || !strings.Contains(err.Error(), "restart the pod") {
		t.Errorf("a dead FUSE mount: %v", err)
	}
	if msg := deviceGone("/dev/rbd0", os.ErrNotExist); !strings.Contains(msg, "/dev/rbd0") || !strings.Contains(msg, "unmapped outside the driver") || !strings.Contains(msg, ioErrorsDoc) {
		t.Errorf("a device gone: %s", msg)
	}
}

func wantWords(t *testing.T, err error, code codes.Code, words ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%v, want %v", err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
}
