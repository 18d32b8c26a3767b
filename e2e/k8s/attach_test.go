//go:build e2e_k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
)

const fakeNode = "rbdcsi-e2e-fake-node"

// TestAttach: a pod's volume is attached through a VolumeAttachment (and
// the attachment is recorded in Ceph); a second node (fake: a Node and a
// CSINode object, and a real node plugin process keeping its heartbeat in
// the node registry, but no kubelet) cannot have the RWO volume while the
// first pod uses it: Kubernetes' attach-detach controller holds back its
// pod (FailedAttachVolume: already used by the first pod), and a VolumeAttachment made for it anyway is
// refused by ControllerPublishVolume; once the first pod is gone, the
// volume attaches to the other node.
func TestAttach(t *testing.T) {
	scenario(t)
	k := newKube(t, "attach")
	k.createPVC(pvcOpts{name: "rwo", class: "rbdcsi-ext4", size: "256Mi"})
	pv := k.waitBound("rwo")
	img := imageOf(t, pv)

	k.createPod(podOpts{name: "first", pvc: "rwo"})
	k.waitRunning("first")
	vas := k.volumeAttachments(pv.Name)
	if len(vas) != 1 || vas[0].Spec.NodeName != k.e.nodeName || vas[0].Spec.Attacher != driverName || !vas[0].Status.Attached {
		t.Fatalf("want one attached VolumeAttachment to %s by %s, have %s", k.e.nodeName, driverName, describeVAs(vas))
	}
	// ControllerPublishVolume recorded the attachment in the image.
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", "-p", pool, img); !strings.Contains(meta, "rbdcsi.attach/"+k.e.nodeName) {
		t.Fatalf("no attachment record for %s in image %s: %s", k.e.nodeName, img, meta)
	}

	startFakeNode(t, k)

	// Kubernetes' own guard: the attach-detach controller does not attach
	// a ReadWriteOnce volume to a second node.
	k.createPod(podOpts{name: "second", pvc: "rwo", nodeName: fakeNode})
	// (v1.37 words it "Waiting for detach ... already used by pod(s) first";
	// older releases "Multi-Attach error ...".)
	eventually(t, shortWait, "a multi-attach event for the second pod", func() (bool, string) {
		ev := k.events("Pod", "second")
		return strings.Contains(ev, "FailedAttachVolume") &&
			(strings.Contains(ev, "Multi-Attach") || strings.Contains(ev, "already used by pod(s) first")), ev
	})

	// The driver's guard: a VolumeAttachment for the other node (as an
	// attach-detach controller without that check would make) is refused
	// by ControllerPublishVolume, and stays unattached.
	manual := "e2e-manual-" + pv.Name
	k.apply(fmt.Sprintf(`
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: %s
spec:
  attacher: %s
  nodeName: %s
  source:
    persistentVolumeName: %s
`, manual, driverName, fakeNode, pv.Name))
	cluster := &kube{t: t, e: k.e} // cluster-scoped objects
	t.Cleanup(func() {
		cluster.runQuiet(3*time.Minute, "delete", "volumeattachment", manual, "--ignore-not-found", "--wait=true", "--timeout=2m")
	})
	var va storagev1.VolumeAttachment
	eventually(t, shortWait, "ControllerPublishVolume to refuse "+fakeNode, func() (bool, string) {
		k.get(&va, "volumeattachment", manual)
		if va.Status.Attached {
			t.Fatalf("the RWO volume was attached to %s while %s uses it", fakeNode, k.e.nodeName)
		}
		return va.Status.AttachError != nil, "no attach error yet"
	})
	msg := va.Status.AttachError.Message
	if !strings.Contains(msg, "FailedPrecondition") || !strings.Contains(msg, k.e.nodeName) {
		t.Fatalf("attach error %q: want FailedPrecondition naming %s", msg, k.e.nodeName)
	}
	t.Logf("ControllerPublishVolume refused %s: %s", fakeNode, msg)
	time.Sleep(10 * time.Second)
	if k.get(&va, "volumeattachment", manual); va.Status.Attached {
		t.Fatalf("the RWO volume was attached to %s while %s uses it", fakeNode, k.e.nodeName)
	}

	// The first pod goes: the volume is detached from the real node ...
	k.deletePod("first")
	eventually(t, volumeWait, "the detach from "+k.e.nodeName, func() (bool, string) {
		for _, va := range k.volumeAttachments(pv.Name) {
			if va.Spec.NodeName == k.e.nodeName {
				return false, describeVAs([]storagev1.VolumeAttachment{va})
			}
		}
		return true, ""
	})
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", "-p", pool, img); strings.Contains(meta, "rbdcsi.attach/"+k.e.nodeName) {
		t.Fatalf("attachment record for %s left after the detach: %s", k.e.nodeName, meta)
	}
	// ... and attaches to the other node: the attacher retries with
	// back-off; an update of the object makes it retry now.
	cluster.must("annotate", "volumeattachment", manual, "rbdcsi-e2e/retry="+token(t), "--overwrite")
	eventually(t, volumeWait, "the attach to "+fakeNode, func() (bool, string) {
		k.get(&va, "volumeattachment", manual)
		return va.Status.Attached, describeVAs([]storagev1.VolumeAttachment{va})
	})
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", "-p", pool, img); !strings.Contains(meta, "rbdcsi.attach/"+fakeNode) {
		t.Fatalf("no attachment record for %s: %s", fakeNode, meta)
	}

	// Detach from the fake node before its plugin stops: no kubelet
	// confirms the pod's end, so delete it by force.
	k.must("delete", "pod", "second", "--grace-period=0", "--force", "--wait=true", "--timeout=1m")
	cluster.must("delete", "volumeattachment", manual, "--wait=true", "--timeout=3m")
	eventually(t, volumeWait, "every VolumeAttachment of "+pv.Name+" gone", func() (bool, string) {
		vas := k.volumeAttachments(pv.Name)
		return len(vas) == 0, describeVAs(vas)
	})
	if meta := ceph(t, k.e, "rbd", "image-meta", "list", "-p", pool, img); strings.Contains(meta, "rbdcsi.attach/") {
		t.Fatalf("attachment records left after every detach: %s", meta)
	}
}

func describeVAs(vas []storagev1.VolumeAttachment) string {
	var b strings.Builder
	for _, va := range vas {
		errMsg := ""
		if va.Status.AttachError != nil {
			errMsg = " error=" + va.Status.AttachError.Message
		}
		fmt.Fprintf(&b, "[%s node=%s attached=%v%s] ", va.Name, va.Spec.NodeName, va.Status.Attached, errMsg)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// startFakeNode registers a node without a kubelet: a Node object the
// attach-detach controller manages, a CSINode naming the driver's node ID,
// and a node plugin process on the host that keeps the node's heartbeat in
// the registry (so the controller knows the node). All removed when the
// test ends.
func startFakeNode(t *testing.T, k *kube) {
	t.Helper()
	dir, err := os.MkdirTemp(k.e.work, "fake-node.")
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.MkdirAll(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"userID": k.e.csiUser, "userKey": k.e.csiKey} {
		if err := os.WriteFile(filepath.Join(secret, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "plugin.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// runs: bin/rbdplugin
	cmd := exec.CommandContext(ctx, k.e.rbdplugin, "--mode=node", "--nodeid="+fakeNode,
		"--endpoint=unix://"+filepath.Join(dir, "csi.sock"), "--cluster-config="+k.e.clusterConfig,
		"--state-dir="+filepath.Join(dir, "state"), "--default-mounter=fuse",
		"--key-dir="+filepath.Join(dir, "keys"), "--allow-key-dir-on-disk",
		"--node-registry=ceph1/rbd", "--node-secret-dir="+secret, "--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("fake node plugin log:\n%s", b)
			}
		}
		_ = os.RemoveAll(dir)
	})

	k.fakeNode(fakeNode, nil)

	// The heartbeat is written before the plugin serves.
	eventually(t, shortWait, "the fake node's heartbeat", func() (bool, string) {
		if cmd.ProcessState != nil {
			return false, "plugin exited"
		}
		out, err := exec.Command("rados", "-c", k.e.cephConf, "-p", pool, "listomapkeys", "rbdcsi.nodes").Output()
		return err == nil && strings.Contains(string(out), fakeNode), string(out)
	})
}
