//go:build e2e_k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// groupSnapClass is the VolumeGroupSnapshotClass the scenario makes, as
// README's "Group snapshots" shows it.
const groupSnapClass = "rbdcsi-e2e-groupsnapclass"

// TestGroupSnapshotRestoresEachMember: a VolumeGroupSnapshot of three
// labelled claims, each written by its own pod, becomes readyToUse with one
// member VolumeSnapshot per claim; each member restores into a claim that
// holds its own source's file and no other's; deleting the group snapshot
// takes its members and their contents with it, and once the claims are gone
// the pool holds no RBD group, no group snapshot record and no image (the
// last part is TestZZCleanupLeavesNothing's, which runs after this test).
//
// It needs the plugin image built on forky (Tentacle's librbd) and a Tentacle
// cluster: the groupsnap pass of scripts/k8s-e2e.sh, which sets
// RBDCSI_E2E_GROUPSNAP=1. There the driver must advertise the group
// controller; elsewhere the test skips.
func TestGroupSnapshotRestoresEachMember(t *testing.T) {
	scenario(t)
	if os.Getenv("RBDCSI_E2E_GROUPSNAP") != "1" {
		t.Skip("needs the plugin image built on forky and a Tentacle cluster: the groupsnap pass of scripts/k8s-e2e.sh (E2E_PASSES=groupsnap) sets RBDCSI_E2E_GROUPSNAP=1")
	}
	k := newKube(t, "groupsnap")
	requireGroupController(t, k)

	cluster := &kube{t: t, e: k.e}
	cluster.apply(fmt.Sprintf(`
apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshotClass
metadata:
  name: %s
driver: %s
deletionPolicy: Delete
`, groupSnapClass, driverName))
	// Runs before newKube's cleanup: the group snapshot must go before its
	// members can, and the class after it.
	t.Cleanup(func() {
		k.runQuiet(5*time.Minute, "delete", "pods", "--all", "--wait=true", "--timeout=4m")
		k.runQuiet(5*time.Minute, "delete", "volumegroupsnapshots", "--all", "--wait=true", "--timeout=4m")
		cluster.runQuiet(time.Minute, "delete", "volumegroupsnapshotclass", groupSnapClass, "--ignore-not-found", "--wait=true")
	})

	// Three claims with the label, each with a file of its own.
	claims := []string{"gs-a", "gs-b", "gs-c"}
	marks := map[string]string{}
	for _, c := range claims {
		k.apply(fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %s
  labels: {app: groupsnap}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: rbdcsi-ext4
  resources:
    requests:
      storage: 256Mi
`, c))
	}
	// A claim that does not carry the label stays out of the group.
	k.createPVC(pvcOpts{name: "gs-other", class: "rbdcsi-ext4", size: "256Mi"})
	for _, c := range append(claims, "gs-other") {
		k.waitBound(c)
	}
	for _, c := range claims {
		k.createPod(podOpts{name: c + "-pod", pvc: c})
	}
	for _, c := range claims {
		k.waitRunning(c + "-pod")
		marks[c] = c + "-" + token(t)
		k.mustExec(c+"-pod", fmt.Sprintf("echo %s > /data/%s && sync", marks[c], c))
	}

	k.apply(fmt.Sprintf(`
apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshot
metadata:
  name: group1
spec:
  volumeGroupSnapshotClassName: %s
  source:
    selector:
      matchLabels: {app: groupsnap}
`, groupSnapClass))
	content := k.waitGroupSnapshotReady("group1")

	// The claims move on after the group snapshot.
	for _, c := range claims {
		k.mustExec(c+"-pod", fmt.Sprintf("echo later > /data/%s && sync", c))
	}

	// The members: one VolumeSnapshot per labelled claim, owned by the group
	// snapshot (v1 has no list of them in the group snapshot's status).
	members := k.groupMembers("group1")
	var sources []string
	for src := range members {
		sources = append(sources, src)
	}
	sort.Strings(sources)
	if strings.Join(sources, ",") != strings.Join(claims, ",") {
		t.Fatalf("group snapshot members are of claims %v, want %v", sources, claims)
	}
	var gsc struct {
		Status *struct {
			VolumeGroupSnapshotHandle *string `json:"volumeGroupSnapshotHandle"`
		} `json:"status"`
	}
	if !cluster.get(&gsc, "volumegroupsnapshotcontent", content) || gsc.Status == nil || gsc.Status.VolumeGroupSnapshotHandle == nil ||
		!strings.HasPrefix(*gsc.Status.VolumeGroupSnapshotHandle, "g1:") {
		t.Errorf("VolumeGroupSnapshotContent %s has no group snapshot ID of this driver: %+v", content, gsc.Status)
	}

	// Each member restores into a claim that holds its own source's file as
	// it was at the group snapshot, and none of the others'.
	for _, c := range claims {
		k.waitSnapshotReady(members[c])
		k.createPVC(pvcOpts{name: c + "-restore", class: "rbdcsi-ext4", size: "256Mi", dataSource: "VolumeSnapshot/" + members[c]})
	}
	for _, c := range claims {
		k.waitBound(c + "-restore")
		k.createPod(podOpts{name: c + "-restore-pod", pvc: c + "-restore"})
	}
	for _, c := range claims {
		pod := c + "-restore-pod"
		k.waitRunning(pod)
		if got := strings.TrimSpace(k.mustExec(pod, "cat /data/"+c)); got != marks[c] {
			t.Errorf("restore of %s reads %q, want the group-snapshot-time %q", c, got, marks[c])
		}
		for _, other := range claims {
			if other == c {
				continue
			}
			if out, err := k.exec(pod, "ls /data/"+other); err == nil {
				t.Errorf("restore of %s holds %s's file: %s", c, other, out)
			}
		}
	}

	// Deleting the group snapshot deletes its members and their contents;
	// the restores live on.
	k.must("delete", "volumegroupsnapshot", "group1", "--wait=true", "--timeout=3m")
	eventually(t, volumeWait, "the group snapshot's members and contents gone", func() (bool, string) {
		left := strings.TrimSpace(k.must("get", "volumesnapshots", "-o", "name"))
		left += " " + strings.TrimSpace(cluster.must("get", "volumesnapshotcontents,volumegroupsnapshotcontents", "-o", "name"))
		return strings.TrimSpace(left) == "", left
	})
	for _, c := range claims {
		if got := strings.TrimSpace(k.mustExec(c+"-restore-pod", "cat /data/"+c)); got != marks[c] {
			t.Errorf("restore of %s reads %q after the group snapshot was deleted, want %q", c, got, marks[c])
		}
	}
	if groups := strings.TrimSpace(ceph(t, k.e, "rbd", "group", "ls", "-p", pool)); groups != "" {
		t.Errorf("RBD groups left after the group snapshot was deleted: %s", groups)
	}

	// Then everything else: pods, restores, claims.
	k.must("delete", "pods", "--all", "--wait=true", "--timeout=4m")
	k.must("delete", "pvc", "--all", "--wait=true", "--timeout=4m")
	eventually(t, volumeWait, "every volume of the scenario gone", func() (bool, string) {
		pvs := strings.TrimSpace(cluster.must("get", "pv", "-o", "name"))
		images := strings.TrimSpace(ceph(t, k.e, "rbd", "ls", "-p", pool))
		return pvs == "" && images == "", "pvs: " + pvs + "; images: " + images
	})
	checkNoGroupLeft(t, k.e)
}

// checkNoGroupLeft: no RBD group and no group snapshot record
// (rbdcsi.vgs.*) in the pool.
func checkNoGroupLeft(t *testing.T, e env) {
	t.Helper()
	if groups := strings.TrimSpace(ceph(t, e, "rbd", "group", "ls", "-p", pool)); groups != "" {
		t.Errorf("RBD groups left in pool %s: %s", pool, groups)
	}
	for _, obj := range strings.Fields(ceph(t, e, "rados", "-p", pool, "ls")) {
		if strings.HasPrefix(obj, "rbdcsi.vgs.") || strings.HasPrefix(obj, "rbd_group_header.") {
			t.Errorf("object %q of a group snapshot left in pool %s", obj, pool)
		}
	}
}

// requireGroupController fails the test unless the deployed controller
// advertises GROUP_CONTROLLER_SERVICE and serves the group snapshot RPCs:
// asked on its own socket, in the pod's emptyDir on this node.
func requireGroupController(t *testing.T, k *kube) {
	t.Helper()
	p := onePod(t, k, "rbdcsi", "controller")
	socks, _ := filepath.Glob(filepath.Join("/var/lib/kubelet/pods", string(p.UID), "volumes/kubernetes.io~empty-dir/*/csi.sock"))
	if len(socks) != 1 {
		t.Fatalf("want one CSI socket in controller pod %s's emptyDirs, found %v", p.Name, socks)
	}
	// The path is longer than a unix socket address may be (108 bytes):
	// dial it through a short symlink.
	short, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(short)
	if err := os.Symlink(socks[0], filepath.Join(short, "s")); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(short, "s"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := csi.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GetPluginCapabilities on %s: %v", socks[0], err)
	}
	advertised := false
	for _, c := range caps.Capabilities {
		advertised = advertised || c.GetService().GetType() == csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE
	}
	if !advertised {
		t.Fatalf("the controller (pod %s, image %s) does not advertise GROUP_CONTROLLER_SERVICE: its librbd lacks rbd_clone4? (capabilities %v)",
			p.Name, p.Spec.Containers[0].Image, caps.Capabilities)
	}
	gcaps, err := csi.NewGroupControllerClient(conn).GroupControllerGetCapabilities(ctx, &csi.GroupControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GroupControllerGetCapabilities: %v", err)
	}
	if len(gcaps.Capabilities) != 1 || gcaps.Capabilities[0].GetRpc().GetType() != csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT {
		t.Fatalf("group controller capabilities %v", gcaps.Capabilities)
	}
}

// waitGroupSnapshotReady waits for the VolumeGroupSnapshot to be readyToUse
// (failing at once on an error in its status) and returns the name of its
// VolumeGroupSnapshotContent.
func (k *kube) waitGroupSnapshotReady(name string) string {
	k.t.Helper()
	var g struct {
		Status *struct {
			ReadyToUse                          *bool   `json:"readyToUse"`
			BoundVolumeGroupSnapshotContentName *string `json:"boundVolumeGroupSnapshotContentName"`
			Error                               *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"status"`
	}
	eventually(k.t, volumeWait, "VolumeGroupSnapshot "+name+" readyToUse", func() (bool, string) {
		if !k.get(&g, "volumegroupsnapshot", name) || g.Status == nil {
			return false, "no status; " + lastEvent(k, "VolumeGroupSnapshot", name)
		}
		if g.Status.Error != nil && g.Status.Error.Message != "" {
			return false, "error: " + g.Status.Error.Message
		}
		return g.Status.ReadyToUse != nil && *g.Status.ReadyToUse && g.Status.BoundVolumeGroupSnapshotContentName != nil, "not ready"
	})
	return *g.Status.BoundVolumeGroupSnapshotContentName
}

// groupMembers maps each source claim of the group snapshot's members to
// its member VolumeSnapshot: the snapshots the snapshot-controller made for
// it, naming it in their status and as their owner.
func (k *kube) groupMembers(group string) map[string]string {
	k.t.Helper()
	var list struct {
		Items []struct {
			Metadata struct {
				Name            string `json:"name"`
				OwnerReferences []struct {
					Kind string `json:"kind"`
					Name string `json:"name"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
			Spec struct {
				Source struct {
					PersistentVolumeClaimName *string `json:"persistentVolumeClaimName"`
				} `json:"source"`
			} `json:"spec"`
			Status *struct {
				VolumeGroupSnapshotName *string `json:"volumeGroupSnapshotName"`
			} `json:"status"`
		} `json:"items"`
	}
	owned := func(i int) bool {
		for _, o := range list.Items[i].Metadata.OwnerReferences {
			if o.Kind == "VolumeGroupSnapshot" && o.Name == group {
				return true
			}
		}
		return false
	}
	// The snapshot-controller names the group in a member's status after it
	// makes the member its owner, and may do so after the group is ready.
	eventually(k.t, shortWait, "the members of "+group+" naming it in their status, and only they", func() (bool, string) {
		list.Items = nil
		k.get(&list, "volumesnapshots")
		for i, s := range list.Items {
			inStatus := s.Status != nil && s.Status.VolumeGroupSnapshotName != nil && *s.Status.VolumeGroupSnapshotName == group
			if owned(i) != inStatus {
				return false, fmt.Sprintf("VolumeSnapshot %s: owned by %s: %v, named in its status: %v", s.Metadata.Name, group, owned(i), inStatus)
			}
		}
		return true, ""
	})
	out := map[string]string{}
	for i, s := range list.Items {
		if !owned(i) {
			continue
		}
		src := s.Spec.Source.PersistentVolumeClaimName
		if src == nil || *src == "" {
			k.t.Fatalf("member VolumeSnapshot %s names no source claim", s.Metadata.Name)
		}
		if prev, dup := out[*src]; dup {
			k.t.Fatalf("claim %s has two members: %s and %s", *src, prev, s.Metadata.Name)
		}
		out[*src] = s.Metadata.Name
	}
	return out
}
