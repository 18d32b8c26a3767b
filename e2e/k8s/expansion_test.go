//go:build e2e_k8s

package k8s

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// capRefusal is what the driver answers a NodeExpandVolume of a mounted
// ext4 with when the kernel refuses the online grow (no CAP_SYS_RESOURCE);
// kubelet puts it in the PVC's NodeResizeError condition.
const capRefusal = "online ext4 resize needs CAP_SYS_RESOURCE, which the plugin lacks"

// TestOnlineExpansion: growing a bound PVC that a running pod has mounted
// grows the filesystem the pod sees, without restarting the pod. Where
// the node cannot grow a mounted ext4 (its root lacks CAP_SYS_RESOURCE,
// which the kernel wants for it), the driver says so and the ext4 case
// skips, naming the driver's answer; TestExpansionAtNextStage/ext4 proves
// what happens there instead.
func TestOnlineExpansion(t *testing.T) {
	scenario(t)
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			x := startExpansion(t, "expand-"+fs, fs)
			refused := ""
			eventually(t, volumeWait, "the pod's df to show the new size", func() (bool, string) {
				if grew, state := x.grown(); grew {
					return true, state
				}
				msg := x.resizeError()
				if fs == "ext4" && strings.Contains(msg, capRefusal) {
					refused = msg
					return true, msg
				}
				return false, fmt.Sprintf("%d KiB (was %d); NodeResizeError: %q; PVC: %s", x.dfKB(), x.initialKB, msg, lastEvent(x.k, "pvc", "grow"))
			})
			if refused != "" {
				if hostHasCapSysResource(t) {
					t.Fatalf("the driver refused to grow the mounted ext4 for lack of CAP_SYS_RESOURCE, which this node's root has: %s", refused)
				}
				t.Logf("the driver's answer: %s", refused)
				t.Skip("this node cannot grow a mounted ext4: its root lacks CAP_SYS_RESOURCE, and the driver refused the online grow (FailedPrecondition); TestExpansionAtNextStage/ext4 checks the growth at the next stage")
			}
			after := x.k.waitRunning("app")
			if after.UID != x.pod.UID || restarts(after) != 0 {
				t.Fatalf("the pod was replaced or restarted (uid %s -> %s, restarts %d)", x.pod.UID, after.UID, restarts(after))
			}
			x.checkGrown()
		})
	}
}

// TestExpansionAtNextStage: on a node that cannot grow a mounted ext4
// (root without CAP_SYS_RESOURCE), growing a PVC that a running pod has
// mounted gets the driver's FailedPrecondition, which names the missing
// capability and says the filesystem grows at the next stage; kubelet
// records it in the PVC's NodeResizeError condition. The next pod on the
// volume (unstage, stage: the node grows ext4 offline then) sees the new
// size and the data, and the condition is gone. Where the node has the
// capability, the growth is online (TestOnlineExpansion/ext4) and there
// is no refusal to check: skipped.
func TestExpansionAtNextStage(t *testing.T) {
	scenario(t)
	t.Run("ext4", func(t *testing.T) {
		if hostHasCapSysResource(t) {
			t.Skip("this node's root has CAP_SYS_RESOURCE: a mounted ext4 grows online (TestOnlineExpansion/ext4), so there is no refusal and no growth at the next stage to check")
		}
		x := startExpansion(t, "expand-next-stage", "ext4")
		var msg string
		eventually(t, volumeWait, "the PVC's NodeResizeError condition with the driver's refusal", func() (bool, string) {
			msg = x.resizeError()
			if grew, state := x.grown(); grew {
				t.Fatalf("the mounted ext4 grew online on a node whose root lacks CAP_SYS_RESOURCE: %s", state)
			}
			return msg != "", fmt.Sprintf("no NodeResizeError condition; PVC: %s", lastEvent(x.k, "pvc", "grow"))
		})
		for _, want := range []string{"code = FailedPrecondition", capRefusal, "the filesystem will be grown when the volume is next staged"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the PVC's NodeResizeError condition does not say %q: %s", want, msg)
			}
		}
		if grew, state := x.grown(); grew {
			t.Fatalf("the mounted ext4 grew online on a node whose root lacks CAP_SYS_RESOURCE: %s", state)
		}

		x.k.deletePod("app")
		x.k.createPod(podOpts{name: "app", pvc: "grow"})
		x.k.waitRunning("app")
		eventually(t, volumeWait, "the new pod's df to show the new size", x.grown)
		x.checkGrown()
		eventually(t, shortWait, "the NodeResizeError condition to go", func() (bool, string) {
			msg := x.resizeError()
			return msg == "", msg
		})
	})
}

// expansion is a 512Mi PVC of the class rbdcsi-<fs>, mounted by pod
// "app", which wrote /data/kept, just resized to 1Gi.
type expansion struct {
	t         *testing.T
	k         *kube
	pv        corev1.PersistentVolume
	pod       corev1.Pod
	initialKB int64
}

func startExpansion(t *testing.T, ns, fs string) *expansion {
	t.Helper()
	k := newKube(t, ns)
	k.createPVC(pvcOpts{name: "grow", class: "rbdcsi-" + fs, size: "512Mi"})
	x := &expansion{t: t, k: k, pv: k.waitBound("grow")}
	k.createPod(podOpts{name: "app", pvc: "grow"})
	x.pod = k.waitRunning("app")
	k.mustExec("app", "echo kept > /data/kept && sync")
	x.initialKB = x.dfKB()
	k.resizePVC("grow", "1Gi")
	return x
}

// dfKB is the size of the pod's filesystem, in KiB.
func (x *expansion) dfKB() int64 {
	x.t.Helper()
	out := x.k.mustExec("app", "df -k /data | tail -n 1")
	f := strings.Fields(out)
	if len(f) < 2 {
		x.t.Fatalf("df: %q", out)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		x.t.Fatalf("df: %q", out)
	}
	return n
}

// grown: the pod's filesystem is larger than the old volume could hold.
func (x *expansion) grown() (bool, string) {
	n := x.dfKB()
	return n > 600*1024, fmt.Sprintf("%d KiB (was %d)", n, x.initialKB)
}

// resizeError is the message of the PVC's NodeResizeError condition, if
// it has one.
func (x *expansion) resizeError() string {
	x.t.Helper()
	var c corev1.PersistentVolumeClaim
	x.k.get(&c, "pvc", "grow")
	for _, cond := range c.Status.Conditions {
		if cond.Type == corev1.PersistentVolumeClaimNodeResizeError && cond.Status == corev1.ConditionTrue {
			return cond.Message
		}
	}
	return ""
}

// checkGrown: the data is still there, and the PVC and the image show the
// new size.
func (x *expansion) checkGrown() {
	x.t.Helper()
	if got := strings.TrimSpace(x.k.mustExec("app", "cat /data/kept")); got != "kept" {
		x.t.Fatalf("after expansion /data/kept reads %q", got)
	}
	want := mustQuantity(x.t, "1Gi")
	eventually(x.t, shortWait, "the PVC's status capacity", func() (bool, string) {
		var c corev1.PersistentVolumeClaim
		x.k.get(&c, "pvc", "grow")
		got, ok := c.Status.Capacity[corev1.ResourceStorage]
		if !ok {
			return false, "no capacity"
		}
		return got.Cmp(want) >= 0, got.String()
	})
	info := ceph(x.t, x.k.e, "rbd", "info", "-p", pool, imageOf(x.t, x.pv))
	if !strings.Contains(info, "size 1 GiB") {
		x.t.Fatalf("rbd info after expansion: %s", info)
	}
}

// hostHasCapSysResource: whether root here may grow a mounted ext4 (the
// node plugin, privileged, has the host's bounding set).
func hostHasCapSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapBnd %q: %v", v, err)
			}
			const capSysResource = 24
			return caps&(1<<capSysResource) != 0
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return false
}
