package controller

import (
	"cmp"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// The fence on two machines, each with a real kernel: A maps
// and writes. A's link is cut. The volume moves to B. A's link comes
// back. A's writes fail, and B's filesystem checks clean.
//
// scripts/kernel-test.sh's joint phase runs it on guest B (the nbd guest:
// the controller and node-b, which maps with $RBDCSI_E2E_MOUNTER) with
// node-a on guest A (the krbd guest, $RBDCSI_E2E_JOINT_MOUNTER), through
// the agent that A serves at $RBDCSI_E2E_JOINT_AGENT; node-a's plugin
// serves CSI and metrics on the agent's next two ports. The host, which
// alone reaches the test's network namespace, takes A's link down and up
// when asked through files in $RBDCSI_E2E_JOINT_DIR, a directory both
// guests share with it.
//
// The detach comes while A is cut off, the case fencing is for: A cannot
// hear of the move until its link is back, and it still holds the
// image's lock. The detach fences A's client (blocklist, fence record)
// and breaks that lock; back, A neither writes nor takes the lock again.
func TestForceDetachAcrossGuests(t *testing.T) {
	agentAddr, dir := os.Getenv("RBDCSI_E2E_JOINT_AGENT"), os.Getenv("RBDCSI_E2E_JOINT_DIR")
	if agentAddr == "" || dir == "" {
		t.Skip("needs a second machine: scripts/kernel-test.sh's joint phase sets RBDCSI_E2E_JOINT_AGENT (its agent) and RBDCSI_E2E_JOINT_DIR")
	}
	host, p, err := net.SplitHostPort(agentAddr)
	harness.Must(t, err, "RBDCSI_E2E_JOINT_AGENT")
	port, err := strconv.Atoi(p)
	harness.Must(t, err, "RBDCSI_E2E_JOINT_AGENT's port")
	agent := harness.Agent{Addr: agentAddr}
	harness.Must(t, agent.Ping(30*time.Second), "guest A's agent")

	ctrlMetrics := freeAddr(t)
	e := newAttachEnv(t, moveCtrlFlags(ctrlMetrics)...)
	e.startNode(t, "node-b", "--default-mounter", cmp.Or(os.Getenv("RBDCSI_E2E_MOUNTER"), "nbd"))
	a := oldNode{m: agent, state: remoteDir(t, agent, "rbdcsi-node-a-state-"),
		metrics: net.JoinHostPort(host, strconv.Itoa(port+2))}
	secretDir := remoteSecretDir(t, agent, e.user, e.key)
	nodeA := harness.StartRemotePlugin(t, e.c, agent, net.JoinHostPort(host, strconv.Itoa(port+1)), filepath.Join(dir, "node-a.log"),
		e.nodeArgs("node-a", secretDir, a.state, a.flags(cmp.Or(os.Getenv("RBDCSI_E2E_JOINT_MOUNTER"), "krbd"))...)...)
	e.nodes["node-a"] = nodeA
	s := stageOnNodeA(t, e, ctrlMetrics, a)
	s.fenced = e.c.Watchers(t, s.image)
	if len(s.fenced) != 1 || !strings.HasPrefix(s.fenced[0], host+":") {
		t.Fatalf("watchers of the image staged on guest A (%s): %v, want node-a's client", host, s.fenced)
	}

	cut := time.Now()
	restore := setLinkA(t, dir, "down")
	beat := heartbeat(t, e.c, "node-a") // the last before the cut
	if err := agent.Ping(2 * time.Second); err == nil {
		t.Fatal("guest A still answers with its link down")
	}
	if l := e.c.Lockers(t, s.image); !slices.Equal(l, s.fenced) {
		t.Fatalf("lock holders of the image with guest A cut off: %v, want its client %v", l, s.fenced)
	}
	s.forceDetach(t)
	if l := e.c.Lockers(t, s.image); len(l) != 0 {
		t.Fatalf("the fenced client's lock is still held: %v", l)
	}
	s.moveToNodeB(t)
	restore()
	t.Logf("guest A was cut off for %.1fs", time.Since(cut).Seconds())
	for deadline := time.Now().Add(time.Minute); agent.Ping(2*time.Second) != nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("guest A does not answer a minute after its link came back")
		}
	}
	// node-a's gRPC server dropped the test's connection meanwhile (as
	// grpc-go does with a client it cannot reach for 20 s), which the
	// test, having sent nothing, did not hear of. A kubelet reaches its
	// node plugin on a unix socket, which no link cut touches.
	nodeA.Redial()
	s.oldNodeCannotWrite(t)
	if l := e.c.Lockers(t, s.image); slices.Contains(l, s.fenced[0]) {
		t.Fatalf("guest A's client holds the lock again after its link came back: %v", l)
	}
	// The unstage lifts the fence with node-a's own Ceph client, which
	// reconnects in its own time after the cut (seconds, or tens of
	// seconds on an emulated guest under load); a lift it cannot make
	// waits for the entries to expire, as designed. The test unstages
	// once node-a reaches Ceph again: a heartbeat newer than the cut.
	for deadline := time.Now().Add(2 * time.Minute); heartbeat(t, e.c, "node-a") == beat; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("node-a wrote no heartbeat in the two minutes after its link came back")
		}
	}
	s.oldNodeUnstages(t)
	s.normalDetach(t)
}

// setLinkA asks the host to set guest A's link to state (up or down) and
// waits until it is; the returned function brings it back up, as the
// test's cleanup does in any case. scripts/kernel-test.sh serves the
// request: it writes state to link-a in dir, and the host, having set the
// link, writes the same to link-a.done.
func setLinkA(t *testing.T, dir, state string) (restore func()) {
	t.Helper()
	set := func(state string) {
		req := filepath.Join(dir, "link-a")
		harness.Must(t, os.WriteFile(req+".tmp", []byte(state), 0o644), "request")
		harness.Must(t, os.Rename(req+".tmp", req), "request")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if b, _ := os.ReadFile(req + ".done"); string(b) == state {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the host did not set guest A's link %s within a minute", state)
			}
		}
	}
	set(state)
	return harness.UndoOnce(t, func() { set("up") })
}

// remoteDir makes an empty directory on m; the test's cleanup removes it
// and what it holds, without crossing into a mount.
func remoteDir(t *testing.T, m harness.Machine, prefix string) string {
	t.Helper()
	dir := strings.TrimSpace(harness.MustRun(t, m, nil, time.Minute, "mktemp", "-d", "-t", prefix+"XXXXXX"))
	t.Cleanup(func() {
		if r, err := m.Run([]string{"rm", "-r", "--one-file-system", dir}, nil, time.Minute); err != nil || r.Failed() != "" {
			t.Errorf("removing %s: %v %s", dir, err, r.Failed())
		}
	})
	return dir
}

// remoteSecretDir writes the node user's credentials on m as a mounted
// Secret holds them (--node-secret-dir), readable by root alone.
func remoteSecretDir(t *testing.T, m harness.Machine, user, key string) string {
	t.Helper()
	dir := remoteDir(t, m, "rbdcsi-node-secret-")
	for name, v := range map[string]string{"userID": user, "userKey": key} {
		harness.MustRun(t, m, []byte(v), time.Minute, "install", "-m", "0600", "/proc/self/fd/0", filepath.Join(dir, name))
	}
	return dir
}

// heartbeat is node's value in the node registry (the Unix time of its
// last heartbeat, by its own clock), as rados prints it.
func heartbeat(t *testing.T, c harness.Cluster, node string) string {
	t.Helper()
	out, err := c.Rados(append([]string{"-p", c.Pool, "getomapval", c.Object("rbdcsi.nodes"), node}, c.NamespaceArgs()...)...)
	harness.Must(t, err, "rados getomapval of %s's heartbeat: %s", node, out)
	return out
}
