//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The csi-addons objects, through the csi-addons controller v0.13.0 (which
// scripts/k8s-e2e.sh installs from the release's files and the image it
// builds) and the sidecars docs/csi-addons.md adds to the install: each
// call goes controller -> sidecar (TLS, a checked token) -> the plugin's
// csi-addons socket, and what it did is checked in Ceph.

// csiAddonsJob is what the tests read of a ReclaimSpaceJob or a
// NetworkFence.
type csiAddonsJob struct {
	Status struct {
		Result         string `json:"result"`
		Message        string `json:"message"`
		ReclaimedSpace string `json:"reclaimedSpace"`
		Conditions     []struct {
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

func (j csiAddonsJob) says() string {
	s := j.Status.Result + ": " + j.Status.Message
	for _, c := range j.Status.Conditions {
		s += "; " + c.Message
	}
	return s
}

// waitResult waits for a csi-addons object's status.result to be set and
// returns the object.
func (k *kube) waitResult(kind, name string, timeout time.Duration) csiAddonsJob {
	k.t.Helper()
	var j csiAddonsJob
	eventually(k.t, timeout, kind+" "+name+" done", func() (bool, string) {
		j = csiAddonsJob{}
		if !k.get(&j, kind, name) {
			return false, "not found"
		}
		return j.Status.Result != "", j.says()
	})
	return j
}

// waitSidecarsConnected waits until the csi-addons controller has
// connected to the sidecar of this node's plugin and to a controller
// plugin's (their CSIAddonsNode objects' state), and a running controller
// pod's sidecar holds the Lease the csi-addons controller sends controller
// calls by: until then a call has nowhere to go, and a job fails at once.
func waitSidecarsConnected(t *testing.T, e env) {
	t.Helper()
	k := &kube{t: t, e: e}
	eventually(t, shortWait, "a controller pod's csi-addons sidecar leading", func() (bool, string) {
		var lease struct {
			Spec struct {
				Holder string `json:"holderIdentity"`
			} `json:"spec"`
		}
		if !k.get(&lease, "lease", "rbd-csi-rbdcsi-dev-csi-addons", "--namespace", driverNamespace) {
			return false, "no Lease rbd-csi-rbdcsi-dev-csi-addons"
		}
		var pod struct {
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		}
		if lease.Spec.Holder == "" || !k.get(&pod, "pod", lease.Spec.Holder, "--namespace", driverNamespace) {
			return false, "held by " + lease.Spec.Holder + ", no such pod"
		}
		return pod.Status.Phase == "Running", lease.Spec.Holder + " " + pod.Status.Phase
	})
	eventually(t, shortWait, "the csi-addons controller connected to the node's and a controller's sidecar", func() (bool, string) {
		var list struct {
			Items []struct {
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
				Spec struct {
					Driver struct {
						Name   string `json:"name"`
						NodeID string `json:"nodeID"`
					} `json:"driver"`
				} `json:"spec"`
				Status struct {
					State   string `json:"state"`
					Message string `json:"message"`
				} `json:"status"`
			} `json:"items"`
		}
		k.get(&list, "csiaddonsnodes", "--all-namespaces")
		var node, controller bool
		var states []string
		for _, n := range list.Items {
			if n.Spec.Driver.Name != driverName {
				continue
			}
			// The csi-addons controller looks for the Lease in the
			// namespace of any one of these objects: one elsewhere
			// would make controller calls miss it.
			if n.Metadata.Namespace != driverNamespace {
				t.Fatalf("CSIAddonsNode %s/%s is outside the driver's namespace %s", n.Metadata.Namespace, n.Metadata.Name, driverNamespace)
			}
			states = append(states, n.Metadata.Name+": "+n.Status.State+" "+n.Status.Message)
			up := n.Status.State == "Connected"
			// Named <node>-<namespace>-<owner kind>-<owner>.
			node = node || up && strings.Contains(n.Metadata.Name, "-daemonset-") && n.Spec.Driver.NodeID == e.nodeName
			controller = controller || up && strings.Contains(n.Metadata.Name, "-deployment-")
		}
		return node && controller, strings.Join(states, "; ")
	})
}

// reclaimJob makes a ReclaimSpaceJob of the claim and waits for its result.
// The csi-addons controller's default retries (6, within a second) ride
// out its own races (a connection it is replacing); a job that fails says
// why in its conditions.
func (k *kube) reclaimJob(name, pvc string) csiAddonsJob {
	k.t.Helper()
	k.apply(fmt.Sprintf(`
apiVersion: csiaddons.openshift.io/v1alpha1
kind: ReclaimSpaceJob
metadata:
  name: %s
spec:
  target: {persistentVolumeClaim: %s}
  retryDeadlineSeconds: 300
`, name, pvc))
	return k.waitResult("reclaimspacejob", name, 5*time.Minute)
}

// usedBytes is what `rbd du` says the image holds.
func usedBytes(t *testing.T, e env, image string) int64 {
	t.Helper()
	var du struct {
		Images []struct {
			Name     string `json:"name"`
			Snapshot string `json:"snapshot"`
			Used     int64  `json:"used_size"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(ceph(t, e, "rbd", "du", "--format", "json", pool+"/"+image)), &du); err != nil {
		t.Fatal(err)
	}
	for _, i := range du.Images {
		if i.Name == image && i.Snapshot == "" {
			return i.Used
		}
	}
	t.Fatalf("rbd du lists no image %s", image)
	return 0
}

// TestReclaimSpaceJob: a ReclaimSpaceJob of a Block claim attached to a
// pod succeeds through both sidecars (the node's half leaves a raw block
// volume alone, the controller's does not sparsify what a node has
// open); once the pod is gone, a second one sparsifies the image: the
// 16 MiB of zeros the pod wrote go back to Ceph, and the data it wrote
// beside them reads back. A Filesystem claim's job reaches the node
// plugin's fstrim, which this machine's mapper (rbd-fuse, which passes no
// discards on) refuses: the job fails and says so.
func TestReclaimSpaceJob(t *testing.T) {
	scenario(t)
	k := newKube(t, "reclaim")
	waitSidecarsConnected(t, k.e)
	const mib = 1 << 20
	k.createPVC(pvcOpts{name: "blk", class: "rbdcsi-block", size: "64Mi", block: true})
	k.createPVC(pvcOpts{name: "fs", class: "rbdcsi-ext4", size: "64Mi"})
	pv := k.waitBound("blk")
	k.waitBound("fs")
	image := imageOf(t, pv)
	k.createPod(podOpts{name: "writer", pvc: "blk", block: true})
	k.createPod(podOpts{name: "fs", pvc: "fs"})
	k.waitRunning("writer")
	k.waitRunning("fs")
	// 16 MiB of zeros (four whole objects), then 1 MiB of data after them.
	k.mustExec("writer", "dd if=/dev/zero of=/dev/xvda bs=1M count=16 conv=fsync 2>&1 && "+
		"yes rbdcsi | head -c 1048576 | dd of=/dev/xvda bs=1M seek=32 conv=fsync 2>&1")
	want := strings.Fields(k.mustExec("writer", "dd if=/dev/xvda bs=1M skip=32 count=1 2>/dev/null | md5sum"))[0]

	j := k.reclaimJob("attached", "blk")
	if j.Status.Result != "Succeeded" {
		t.Fatalf("the job of an attached Block claim: %s", j.says())
	}
	before := usedBytes(t, k.e, image)
	if before < 17*mib {
		t.Fatalf("the image holds %d bytes after the attached job; the pod wrote 17 MiB, none of it to be freed while attached", before)
	}

	t.Run("filesystem on rbd-fuse", func(t *testing.T) {
		kk := *k
		kk.t = t
		j := kk.reclaimJob("fuse", "fs")
		if j.Status.Result != "Failed" || !strings.Contains(j.says(), "rbd-fuse") {
			t.Errorf("the job of a claim mapped with rbd-fuse: %s; want it failed by the node plugin, naming rbd-fuse", j.says())
		}
	})

	k.deletePod("writer")
	eventually(t, volumeWait, "the claim detached", func() (bool, string) {
		vas := k.volumeAttachments(pv.Name)
		return len(vas) == 0, fmt.Sprintf("%d VolumeAttachments", len(vas))
	})
	j = k.reclaimJob("detached", "blk")
	if j.Status.Result != "Succeeded" {
		t.Fatalf("the job of a detached Block claim: %s", j.says())
	}
	after := usedBytes(t, k.e, image)
	if before-after < 16*mib {
		t.Errorf("the image held %d bytes before the sparsify and %d after; want the 16 MiB of zeros freed", before, after)
	}
	// Not the job's status.reclaimedSpace: the csi-addons controller
	// v0.13.0 computes it as max(post_usage - pre_usage, 0), so a
	// sparsify that frees space reports 0 (docs/csi-addons.md says so).
	// The plugin's pre_usage and post_usage are checked over gRPC by
	// e2e/addons; here rbd du shows what was freed.
	t.Logf("the job reports reclaimedSpace %q; rbd du: %d bytes before, %d after", j.Status.ReclaimedSpace, before, after)
	k.createPod(podOpts{name: "reader", pvc: "blk", block: true})
	k.waitRunning("reader")
	if got := strings.Fields(k.mustExec("reader", "dd if=/dev/xvda bs=1M skip=32 count=1 2>/dev/null | md5sum"))[0]; got != want {
		t.Errorf("after the sparsify the data reads back with md5 %s, want %s", got, want)
	}
	if zeros := k.mustExec("reader", "dd if=/dev/xvda bs=1M count=16 2>/dev/null | tr -d '\\000' | wc -c"); strings.TrimSpace(zeros) != "0" {
		t.Errorf("after the sparsify the first 16 MiB hold %s non-zero bytes", strings.TrimSpace(zeros))
	}
}

// blocklisted is the monitors' blocklist as admin reads it: address
// entries and ranges.
func blocklisted(t *testing.T, e env) (addrs, ranges []string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(ceph(t, e, "ceph", "osd", "blocklist", "ls", "--format", "json")))
	for {
		var list []struct {
			Addr  string `json:"addr"`
			Range string `json:"range"`
		}
		if err := dec.Decode(&list); err != nil {
			return addrs, ranges
		}
		for _, l := range list {
			if l.Range != "" {
				ranges = append(ranges, l.Range)
			} else {
				addrs = append(addrs, l.Addr)
			}
		}
	}
}

// TestNetworkFence: a NetworkFence of a NetworkFenceClass (the guide's
// fencing user, docs/csi-addons.md) bars a host and a /24 in Ceph's OSD
// blocklist; fenceState Unfenced lifts both, Fenced again bars them;
// deleting the object leaves them (the csi-addons controller does not
// unfence on delete), and a NetworkFence of the same blocks, Unfenced,
// lifts them. A block wider than /16 is refused and the object says why. No address here is any host's: the entries are
// only checked in the blocklist.
func TestNetworkFence(t *testing.T) {
	scenario(t)
	e := loadEnv(t)
	k := &kube{t: t, e: e}
	waitSidecarsConnected(t, e)
	var clusters []struct {
		ClusterID string `json:"clusterID"`
	}
	data, err := os.ReadFile(e.clusterConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &clusters); err != nil || len(clusters) == 0 {
		t.Fatalf("the cluster map %s: %v", e.clusterConfig, err)
	}
	const host, block = "198.19.250.7", "198.19.251.0"
	t.Cleanup(func() {
		k.runQuiet(shortWait, "delete", "networkfence", "e2e-fence", "e2e-too-wide", "--ignore-not-found", "--wait=true", "--timeout=1m")
		k.runQuiet(shortWait, "delete", "networkfenceclass", "e2e-fence", "--ignore-not-found")
		for _, args := range [][]string{{"rm", host + ":0/0"}, {"range", "rm", block + "/24"}} {
			_, _ = cephTry(e, "ceph", append([]string{"osd", "blocklist"}, args...)...)
		}
	})
	k.apply(fmt.Sprintf(`
apiVersion: csiaddons.openshift.io/v1alpha1
kind: NetworkFenceClass
metadata:
  name: e2e-fence
spec:
  provisioner: %s
  parameters:
    clusterID: %s
    csiaddons.openshift.io/networkfence-secret-name: rbdcsi-fence
    csiaddons.openshift.io/networkfence-secret-namespace: rbdcsi
`, driverName, clusters[0].ClusterID))
	fence := func(name, state string, cidrs ...string) {
		t.Helper()
		k.apply(fmt.Sprintf(`
apiVersion: csiaddons.openshift.io/v1alpha1
kind: NetworkFence
metadata:
  name: %s
spec:
  networkFenceClassName: e2e-fence
  fenceState: %s
  cidrs: [%s]
`, name, state, strings.Join(cidrs, ", ")))
	}
	// The controller sets the result of each state it reached; a stale
	// result of the last state is told apart by the blocklist itself.
	listed := func() (hostIn, blockIn bool, state string) {
		addrs, ranges := blocklisted(t, e)
		return slices.Contains(addrs, host+":0/0"), slices.Contains(ranges, block+":0/24"),
			fmt.Sprintf("addresses %v, ranges %v", addrs, ranges)
	}
	fenced := func() (bool, string) {
		h, b, state := listed()
		return h && b, state
	}
	lifted := func() (bool, string) {
		h, b, state := listed()
		return !h && !b, state
	}
	// The csi-addons controller retries a NetworkFence whose call failed
	// (a connection it was replacing, say), so a result is waited for.
	waitFence := func(name, result string) csiAddonsJob {
		t.Helper()
		var j csiAddonsJob
		eventually(t, volumeWait, "NetworkFence "+name+" "+result, func() (bool, string) {
			j = csiAddonsJob{}
			if !k.get(&j, "networkfence", name) {
				return false, "not found"
			}
			return j.Status.Result == result, j.says()
		})
		return j
	}
	wantResult := func(name string) { t.Helper(); waitFence(name, "Succeeded") }

	fence("e2e-fence", "Fenced", host+"/32", block+"/24")
	wantResult("e2e-fence")
	eventually(t, volumeWait, "the host and the block in the blocklist", fenced)
	fence("e2e-fence", "Unfenced", host+"/32", block+"/24")
	eventually(t, volumeWait, "both lifted by fenceState Unfenced", lifted)
	fence("e2e-fence", "Fenced", host+"/32", block+"/24")
	eventually(t, volumeWait, "both in the blocklist again", fenced)
	// The csi-addons controller v0.13.0 only drops its finalizer when a
	// NetworkFence is deleted: the fence stays (docs/csi-addons.md says to
	// unfence first). An object of the same CIDRs, Unfenced, lifts it.
	if _, err := k.run(volumeWait, "", "delete", "networkfence", "e2e-fence", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if ok, state := fenced(); !ok {
		t.Errorf("deleting a Fenced NetworkFence lifted the fence (%s): docs/csi-addons.md says it stays", state)
	}
	fence("e2e-fence", "Unfenced", host+"/32", block+"/24")
	eventually(t, volumeWait, "both lifted by a new NetworkFence, Unfenced", lifted)
	wantResult("e2e-fence")
	if _, err := k.run(volumeWait, "", "delete", "networkfence", "e2e-fence", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}

	fence("e2e-too-wide", "Fenced", "10.0.0.0/8")
	eventually(t, volumeWait, "a fence of 10.0.0.0/8 refused, naming the /16 limit", func() (bool, string) {
		var j csiAddonsJob
		if !k.get(&j, "networkfence", "e2e-too-wide") {
			return false, "not found"
		}
		return j.Status.Result == "Failed" && strings.Contains(j.says(), "/16"), j.says()
	})
	if _, ranges := blocklisted(t, e); slices.Contains(ranges, "10.0.0.0:0/8") {
		t.Errorf("a refused fence is in the blocklist: %v", ranges)
	}
}
