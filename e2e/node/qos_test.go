package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

const qosPodUID = "7e1f3a52-0c4d-4b8e-9f21-3a5b6c7d8e9f"

// podCgroup lays out a cgroup v2 hierarchy as kubelet's cgroupfs driver
// would for a Burstable pod, with the io controller enabled down to it,
// and returns its root and the pod's directory.
func podCgroup(t *testing.T) (root, pod string) {
	t.Helper()
	root = t.TempDir()
	harness.Must(t, unix.Mount("cgroup2", root, "cgroup2", 0, ""), "mount cgroup2")
	pod = filepath.Join(root, "kubepods", "burstable", "pod"+qosPodUID)
	t.Cleanup(func() {
		for _, d := range []string{pod, filepath.Dir(pod), filepath.Join(root, "kubepods")} {
			if err := os.Remove(d); err != nil {
				t.Errorf("removing cgroup %s: %v", d, err)
			}
		}
		harness.Must(t, unix.Unmount(root, 0), "unmount cgroup2")
	})
	dir := root
	for _, sub := range []string{"kubepods", "burstable", "pod" + qosPodUID} {
		harness.Must(t, os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+io"), 0), "enable io in %s", dir)
		dir = filepath.Join(dir, sub)
		harness.Must(t, os.Mkdir(dir, 0o755), "mkdir %s", dir)
	}
	return root, pod
}

// readTime reads 4 MiB of the device, bypassing the page cache, from a
// process in the pod's cgroup.
func readTime(t *testing.T, pod, device string) time.Duration {
	t.Helper()
	start := time.Now()
	// The shell moves itself into the pod's cgroup, then becomes dd.
	// runs: sh dd
	out, err := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec dd if="$2" of=/dev/null bs=1M count=4 iflag=direct`, "sh", pod, device).CombinedOutput()
	harness.Must(t, err, "dd: %s", out)
	return time.Since(start)
}

// krbd ignores librbd's QoS: a krbd volume's limits go into the pod's
// cgroup as its device's io.max line when it is published, and a publish
// after the class changed sets the new ones. A read is capped, then not;
// compared as a ratio in the same run. Other mappers leave io.max alone
// (librbd enforces the limits), and limits never fail a publish.
func TestQoSInThePodCgroup(t *testing.T) {
	var root, pod string
	args := []string{"--cgroup-root", ""}
	if mounter() == "krbd" {
		root, pod = podCgroup(t)
		args[1] = root
	}
	e := setup(t, args...)
	c := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("qos", 64<<20, c)
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
	defer e.unstage(v, staging)
	publish := func(qos string) {
		t.Helper()
		req := e.publishReq(v, staging, target, c, false)
		req.PublishContext = map[string]string{"qos": qos}
		req.VolumeContext = map[string]string{"csi.storage.k8s.io/pod.uid": qosPodUID}
		_, err := e.nc.NodePublishVolume(ctx(t), req)
		harness.Must(t, err, "NodePublishVolume with limits %q", qos)
	}
	unpublish := func() {
		t.Helper()
		_, err := e.nc.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target})
		harness.Must(t, err, "NodeUnpublishVolume")
	}

	publish("rbps=1048576 wbps=0 riops=0 wiops=0")
	if mounter() != "krbd" {
		unpublish()
		return
	}
	ioMax, err := os.ReadFile(filepath.Join(pod, "io.max"))
	harness.Must(t, err, "io.max")
	if !strings.Contains(string(ioMax), " rbps=1048576 wbps=max riops=max wiops=max") {
		t.Fatalf("io.max after the publish: %q", ioMax)
	}
	capped := readTime(t, pod, target)
	unpublish()
	publish("") // its class changed to one without limits
	free := readTime(t, pod, target)
	unpublish()
	ioMax, _ = os.ReadFile(filepath.Join(pod, "io.max"))
	t.Logf("4 MiB read in the pod's cgroup: %v at 1 MiB/s, %v after the limits were lifted (%.1fx); io.max now %q", capped, free, float64(capped)/float64(free), ioMax)
	if capped < 3*free {
		t.Errorf("the 1 MiB/s cap did not slow the read down threefold: %v capped, %v uncapped", capped, free)
	}
}

// librbd's QoS limits, as the controller writes them into the image's
// metadata, reach a mapped volume at once with the librbd mappers (nbd,
// fuse): a synced write is capped, then not, without a remap. krbd
// ignores them; its limits go through the pod's cgroup (above).
func TestLibrbdQoSReachesAMappedVolume(t *testing.T) {
	if mounter() == "krbd" {
		t.Skip("krbd does not read librbd's limits; TestQoSInThePodCgroup covers krbd")
	}
	e := setup(t)
	c := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("librbd-qos", 64<<20, c)
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	staging := e.path("staging")
	e.stage(v, staging, c)
	defer e.unstage(v, staging)
	limit := func(bps string) {
		t.Helper()
		_, err := e.c.RBD(append([]string{"image-meta", "set", "--pool", e.c.Pool, image, "conf_rbd_qos_bps_limit", bps}, e.c.NamespaceArgs()...)...)
		harness.Must(t, err, "rbd image-meta set")
	}
	const size = 4 << 20
	harness.TimedWrite(t, staging, size) // the first write allocates
	free := harness.TimedWrite(t, staging, size)
	limit("1048576")
	capped := harness.TimedWrite(t, staging, size)
	limit("0")
	again := harness.TimedWrite(t, staging, size)
	t.Logf("%s: 4 MiB written and synced: %v uncapped, %v at 1 MiB/s (%.1fx), %v uncapped again", mounter(), free, capped, float64(capped)/float64(free), again)
	// At 1 MiB/s, 4 MiB take 3 s or more; uncapped, well under a second
	// even in the kernel VM.
	if capped < 3*free || capped < 3*again {
		t.Errorf("the 1 MiB/s limit did not slow %s's write threefold: %v capped, %v and %v uncapped", mounter(), capped, free, again)
	}
}
