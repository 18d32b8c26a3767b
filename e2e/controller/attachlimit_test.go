package controller

import (
	"os/exec"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// A node's --max-volumes-per-node reaches the controller in its heartbeat:
// one publish past it is ResourceExhausted, a detach frees a slot, a
// republish of an attached volume needs none, nodes without a limit are
// not affected, and an index entry a crash left behind (no attachment
// record) is found stale instead of holding a slot.
func TestAttachLimit(t *testing.T) {
	e := setupAttach(t)
	e.startNode(t, "node-small", "--max-volumes-per-node", "2")
	rwo := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	var v [4]string
	for i := range v {
		v[i] = e.mustCreate(t, "attach-limit-"+string(rune('a'+i)), 8*mib).VolumeId
	}

	harness.Must(t, e.publish(t, v[0], "node-small", rwo, false), "first volume")
	harness.Must(t, e.publish(t, v[1], "node-small", rwo, false), "second volume")
	harness.Must(t, e.publish(t, v[1], "node-small", rwo, false), "the second again, at the limit")
	wantCode(t, e.publish(t, v[2], "node-small", rwo, false), codes.ResourceExhausted, "a third volume")
	harness.Must(t, e.publish(t, v[2], "node-a", rwo, false), "a node without a limit")
	e.unpublish(t, v[2], "node-a")

	e.unpublish(t, v[1], "node-small")
	harness.Must(t, e.publish(t, v[2], "node-small", rwo, false), "a third volume after a detach")

	// As if a publish of v[3] had died between indexing and recording.
	e.unpublish(t, v[2], "node-small")
	rados := exec.Command("rados", "-c", e.c.Conf, "--id", "admin", "-p", e.c.Pool,
		"setomapval", e.c.Object("rbdcsi.nodes"), "attach/node-small/"+v[3], "x")
	if out, err := rados.CombinedOutput(); err != nil {
		t.Fatalf("rados setomapval: %v: %s", err, out)
	}
	harness.Must(t, e.publish(t, v[1], "node-small", rwo, false), "publish past a stale index entry")
	if got := e.publishedNodes(t, v[3]); len(got) != 0 {
		t.Fatalf("the volume behind the stale entry is attached to %v", got)
	}
	wantCode(t, e.publish(t, v[2], "node-small", rwo, false), codes.ResourceExhausted, "a third volume again")

	e.unpublish(t, v[0], "node-small")
	e.unpublish(t, v[1], "node-small")
	if left := e.c.IndexLeft(); len(left) > 0 {
		t.Fatalf("index entries left after every detach: %v", left)
	}
}
