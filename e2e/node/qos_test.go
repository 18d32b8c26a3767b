package node

import (
	"fmt"
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

// ioMaxLine is the pod cgroup's io.max line for the device major:minor,
// if it has one.
func ioMaxLine(t *testing.T, pod, dev string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pod, "io.max"))
	harness.Must(t, err, "io.max")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, dev+" ") {
			return line
		}
	}
	return ""
}

// krbd ignores librbd's QoS: a krbd volume's limits go into the pod's
// cgroup as its device's io.max line when it is published, and a publish
// after the class changed sets the new ones (here: none, and the line is
// gone). A read is capped, then not; compared as a ratio in the same run.
func TestQoSInThePodCgroup(t *testing.T) {
	if mounter() != "krbd" {
		t.Skipf("the pod cgroup's io.max carries the limits of krbd volumes only; with %s, librbd enforces them (TestLibrbdQoSReachesAMappedVolume)", mounter())
	}
	root, pod := podCgroup(t)
	e := setup(t, "--cgroup-root", root)
	c := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	v := e.createVolume("qos", 64<<20, c)
	staging, target := e.path("staging"), e.path("target")
	e.stage(v, staging, c)
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
	t.Cleanup(unpublish) // before the unstage; a repeat is a no-op

	publish("rbps=1048576 wbps=0 riops=0 wiops=0")
	var st unix.Stat_t
	harness.Must(t, unix.Stat(target, &st), "stat %s", target)
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if got, want := ioMaxLine(t, pod, dev), dev+" rbps=1048576 wbps=max riops=max wiops=max"; got != want {
		t.Fatalf("io.max line of the device after the publish: %q, want %q", got, want)
	}
	capped := readTime(t, pod, target)
	unpublish()
	publish("") // its class changed to one without limits
	// The kernel lists only devices with a limit left.
	if got := ioMaxLine(t, pod, dev); got != "" {
		t.Errorf("io.max after a publish without limits still limits the device: %q", got)
	}
	free := readTime(t, pod, target)
	unpublish()
	t.Logf("4 MiB read in the pod's cgroup: %v at 1 MiB/s, %v after the limits were lifted (%.1fx)", capped, free, float64(capped)/float64(free))
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
