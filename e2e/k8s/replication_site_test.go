//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The second Ceph cluster of the replication scenario (site B; the
// install's own cluster is site A): scripts/k8s-e2e.sh boots it on a
// second address of the node, peers pool rbd of both clusters and runs an
// rbd-mirror on each. What the driver needs to reach it, the scenario
// adds as docs/disaster-recovery.md's Kubernetes runbook does, and removes.

// siteB is cluster B as the scenario reaches it.
type siteB struct {
	e         env // with B's ceph.conf: ceph(t, b.e, ...) acts on B
	clusterID string
	monHost   string
}

// siteBClusterID is B's entry in the driver's cluster map.
const siteBClusterID = "ceph-dr"

func loadSiteB(t *testing.T, e env) siteB {
	t.Helper()
	b := siteB{e: e, clusterID: siteBClusterID, monHost: os.Getenv("E2E_SITE_B_MON_HOST")}
	b.e.cephConf = os.Getenv("E2E_SITE_B_CONF")
	if b.e.cephConf == "" || b.monHost == "" {
		t.Fatal("E2E_SITE_B_CONF and E2E_SITE_B_MON_HOST are not set: scripts/k8s-e2e.sh boots the second site in the kustomize pass")
	}
	return b
}

// addUsers gives B the driver's two Ceph users, with the keys and caps
// they have on A: the controller and the node plugins each have one user
// of their own (one Secret each), whatever cluster a call names.
func (b siteB) addUsers(t *testing.T, a env, users ...string) {
	t.Helper()
	dir := t.TempDir()
	for _, u := range users {
		file := filepath.Join(dir, u+".keyring")
		ceph(t, a, "ceph", "auth", "get", "client."+u, "-o", file)
		ceph(t, b.e, "ceph", "auth", "import", "-i", file)
	}
	t.Cleanup(func() {
		for _, u := range users {
			if out, err := cephTry(b.e, "ceph", "auth", "del", "client."+u); err != nil {
				t.Errorf("removing client.%s from site B: %v: %s", u, err, out)
			}
		}
	})
}

// addToClusterMap adds B to the driver's cluster map and waits until both
// plugins' mounted copies show it (the plugins re-read a changed map
// without a restart). B's entry goes when the test ends.
func (b siteB) addToClusterMap(t *testing.T, k *kube) {
	t.Helper()
	k = &kube{t: t, e: k.e} // the driver's namespace
	const key = clusterMapKey
	addToClusterMap(t, k, map[string]any{"clusterID": b.clusterID, "monitors": []string{b.monHost}})
	// The plugins' copies: the controller's and this node's node plugin.
	for _, obj := range []string{"deployment/rbdcsi-controller", "daemonset/rbdcsi-node"} {
		eventually(t, shortWait, "the cluster map with "+b.clusterID+" in "+obj, func() (bool, string) {
			out, err := k.run(shortWait, "", "--namespace", driverNamespace, "exec", obj, "-c", "rbdplugin", "--",
				"cat", "/etc/rbdcsi/clusters/"+key)
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(out, `"`+b.clusterID+`"`), out
		})
	}
}

// addReplicationSecret makes the Secret rbdcsi-replication, which the
// controller's csi-addons sidecar may read (deploy/csi-addons), of the
// given user and its key on site A, as docs/disaster-recovery.md does.
func addReplicationSecret(t *testing.T, k *kube, user string) {
	t.Helper()
	k = &kube{t: t, e: k.e} // the driver's namespace
	key := strings.TrimSpace(ceph(t, k.e, "ceph", "auth", "get-key", "client."+user))
	k.apply(fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata:
  name: rbdcsi-replication
  namespace: rbdcsi
stringData:
  userID: %q
  userKey: %q
`, user, key))
	t.Cleanup(func() {
		k.runQuiet(shortWait, "--namespace", "rbdcsi", "delete", "secret", "rbdcsi-replication", "--ignore-not-found")
	})
}

// mirrorInfo is what `rbd info --format json` says of an image's
// mirroring; exists is false when there is no such image.
type mirrorInfo struct {
	exists  bool
	state   string // "enabled", "disabled"
	primary bool
}

func imageMirror(t *testing.T, e env, image string) mirrorInfo {
	t.Helper()
	out, err := cephTry(e, "rbd", "info", "--format", "json", pool+"/"+image)
	if err != nil {
		if strings.Contains(out, "No such file") {
			return mirrorInfo{}
		}
		t.Fatalf("rbd info %s: %v: %s", image, err, out)
	}
	var info struct {
		Mirroring struct {
			State   string `json:"state"`
			Primary bool   `json:"primary"`
		} `json:"mirroring"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("rbd info %s: %v: %s", image, err, out)
	}
	return mirrorInfo{exists: true, state: info.Mirroring.State, primary: info.Mirroring.Primary}
}

// mirrorStatus is the state rbd-mirror reports of an image at a site
// ("up+replaying", "up+stopped", ...) with its description.
func mirrorStatus(e env, image string) string {
	out, err := cephTry(e, "rbd", "mirror", "image", "status", "--format", "json", pool+"/"+image)
	if err != nil {
		return strings.TrimSpace(out)
	}
	var st struct {
		State       string `json:"state"`
		Description string `json:"description"`
	}
	if json.Unmarshal([]byte(out), &st) != nil {
		return out
	}
	return st.State + ": " + st.Description
}

// volumeReplication is what the tests read of a VolumeReplication.
type volumeReplication struct {
	Status struct {
		State      string `json:"state"`
		Message    string `json:"message"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

func (v volumeReplication) says() string {
	s := v.Status.State + ": " + v.Status.Message
	for _, c := range v.Status.Conditions {
		s += fmt.Sprintf("; %s=%s %s", c.Type, c.Status, c.Message)
	}
	return s
}

// setReplication applies a VolumeReplication of the claim in the given
// state and waits until its status.state is that state ("primary" ->
// "Primary").
func (k *kube) setReplication(name, class, pvc, state string, timeout time.Duration) {
	k.t.Helper()
	k.apply(fmt.Sprintf(`
apiVersion: replication.storage.openshift.io/v1alpha1
kind: VolumeReplication
metadata:
  name: %s
spec:
  volumeReplicationClass: %s
  replicationState: %s
  dataSource: {apiGroup: "", kind: PersistentVolumeClaim, name: %s}
  autoResync: false
`, name, class, state, pvc))
	want := strings.ToUpper(state[:1]) + state[1:]
	start, poked := time.Now(), false
	eventually(k.t, timeout, "VolumeReplication "+name+" "+want, func() (bool, string) {
		var v volumeReplication
		if !k.get(&v, "volumereplication", name) {
			return false, "not found"
		}
		// The csi-addons controller v0.13.0 retries a failed reconcile
		// (a promote refused until the demotion has arrived) with a
		// delay that doubles up to 16 min: a change of the spec retries
		// at once. Only autoResync can change without effect, and only
		// while primary (a secondary copy resyncs with force when it is
		// set).
		if state == "primary" && v.Status.State != want && time.Since(start) > 20*time.Second {
			start, poked = time.Now(), !poked
			k.runQuiet(shortWait, "patch", "volumereplication", name, "--type", "merge",
				"-p", fmt.Sprintf(`{"spec":{"autoResync":%t}}`, poked))
		}
		return v.Status.State == want, v.says()
	})
	if poked {
		k.runQuiet(shortWait, "patch", "volumereplication", name, "--type", "merge", "-p", `{"spec":{"autoResync":false}}`)
	}
}

// dropReplication deletes a VolumeReplication, which disables the
// replication of its volume (the csi-addons controller's finalizer). One
// that is still there after timeout (a run that failed half-way, at a
// copy that cannot be disabled) loses its finalizers and its claim's, so
// the namespace can go; stuck says whether that was needed.
func (k *kube) dropReplication(name, pvc string, timeout time.Duration) (stuck bool) {
	if _, err := k.run(timeout+time.Minute, "", "delete", "volumereplication", name, "--ignore-not-found",
		"--wait=true", fmt.Sprintf("--timeout=%ds", int(timeout.Seconds()))); err == nil {
		return false
	}
	k.runQuiet(shortWait, "patch", "volumereplication", name, "--type", "merge", "-p", `{"metadata":{"finalizers":null}}`)
	k.runQuiet(shortWait, "patch", "pvc", pvc, "--type", "json", "-p",
		`[{"op":"remove","path":"/metadata/finalizers"}]`)
	return true
}
