package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/nodereg"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A call Ceph refuses is PermissionDenied, and its message names the
// request's user, what it was refused on and the caps docs/install.md
// gives for it, never the key: every call that touches an image, with a
// user whose caps cover no pool and with one the monitors reject, and
// GetCapacity with the controller's own credentials rejected.
func TestRefusalsNameTheUserAndCaps(t *testing.T) {
	f := newFenceEnv(t, controller.Options{Credentials: &cluster.Credentials{ID: "ctrl-rejected", Key: key}})
	v := f.c.mustCreate(t, "vol", nil)
	snap := f.c.mustSnapshot(t, "snap", v)
	f.ceph.DenyPools("poolless")
	f.ceph.RejectUser("rejected")
	f.ceph.RejectUser("ctrl-rejected")
	size := &csi.CapacityRange{RequiredBytes: 16 * mib}
	params := map[string]string{"clusterID": clusterID, "pool": poolName}
	calls := map[string]func(map[string]string) error{
		"CreateVolume": func(s map[string]string) error {
			_, err := f.c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "new", CapacityRange: size, VolumeCapabilities: fsCaps(), Parameters: params, Secrets: s})
			return err
		},
		"CreateVolume from a snapshot": func(s map[string]string) error {
			_, err := f.c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "restore", CapacityRange: size, VolumeCapabilities: fsCaps(), Parameters: params, Secrets: s, VolumeContentSource: fromSnapshot(snap)})
			return err
		},
		"CreateVolume from a volume": func(s map[string]string) error {
			_, err := f.c.c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "clone", CapacityRange: size, VolumeCapabilities: fsCaps(), Parameters: params, Secrets: s, VolumeContentSource: fromVolume(v)})
			return err
		},
		"DeleteVolume": func(s map[string]string) error {
			_, err := f.c.c.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: v, Secrets: s})
			return err
		},
		"CreateSnapshot": func(s map[string]string) error {
			_, err := f.c.c.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "snap2", SourceVolumeId: v, Secrets: s})
			return err
		},
		"DeleteSnapshot": func(s map[string]string) error {
			_, err := f.c.c.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snap, Secrets: s})
			return err
		},
		"ControllerExpandVolume": func(s map[string]string) error {
			_, err := f.c.c.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: v, CapacityRange: size, Secrets: s})
			return err
		},
		"ControllerPublishVolume": func(s map[string]string) error {
			_, err := f.c.c.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v, NodeId: "node-a",
				VolumeCapability: fsCaps()[0], Secrets: s})
			return err
		},
	}
	users := map[string][]string{
		"poolless": {"Ceph refused client.poolless on pool rbd:", "osd 'profile rbd pool=rbd'"},
		"rejected": {"the Ceph monitors 127.0.0.1:3300 refused client.rejected", "userKey"},
	}
	for name, call := range calls {
		for user, want := range users {
			err := call(map[string]string{"userID": user, "userKey": key})
			wantRefusal(t, err, name+" as "+user, append(want, cluster.CapsDoc)...)
		}
	}
	if got := f.attachedTo(t, v); len(got) != 0 {
		t.Errorf("refused publishes attached the volume to %v", got)
	}
	_, err := f.c.c.GetCapacity(ctx(t), &csi.GetCapacityRequest{Parameters: params})
	wantRefusal(t, err, "GetCapacity with rejected controller credentials", "refused client.ctrl-rejected", cluster.CapsDoc)
}

func wantRefusal(t *testing.T, err error, what string, want ...string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("%s: %v, want PermissionDenied", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("%s: the error shows the key", what)
	}
}

// metaRefuser refuses every SetMetadata as Ceph refuses a user that may
// only read the pool.
type metaRefuser struct{ rbd.Backend }

func (m metaRefuser) SetMetadata(_ context.Context, p rbd.Pool, _ string, _ map[string]string) error {
	return rbd.RefusedOn(p, fmt.Errorf("setting metadata: %w", rbd.ErrPermission))
}

// An attach whose record Ceph refuses leaves no entry in the node's
// attachment index, which would count against the node's volume limit.
func TestRefusedAttachLeavesNoIndexEntry(t *testing.T) {
	e := newEnv(t)
	reg := nodereg.New(e.ceph, e.pool, "", time.Minute)
	must(t, reg.Beat(ctx(t), nodereg.Node{ID: "node-a", MaxVolumes: 5}), "heartbeat")
	c := e.start("", controller.Options{Nodes: reg})
	v := c.mustCreate(t, "vol", nil)
	e.wrap = func(b rbd.Backend) rbd.Backend { return metaRefuser{b} }
	refusing := e.start("", controller.Options{Nodes: reg})
	_, err := refusing.c.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v, NodeId: "node-a",
		VolumeCapability: fsCaps()[0], Secrets: secrets()})
	wantRefusal(t, err, "publish whose record Ceph refuses", "Ceph refused client.csi on pool rbd", cluster.CapRBD("", "rbd"))
	if ids, err := reg.Attachments(ctx(t), "node-a"); err != nil || len(ids) != 0 {
		t.Errorf("attachment index after a refused attach: %v, %v", ids, err)
	}
}
