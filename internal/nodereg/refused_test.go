package nodereg

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

// A heartbeat Ceph refuses names the node user, the registry object and
// the node user's caps (not the pool-wide ones the backend names for a
// driver user), in the instance's object and in a RADOS namespace too.
func TestRefusedHeartbeatNamesTheNodeCaps(t *testing.T) {
	ceph := fake.New(fake.Options{})
	ceph.DenyPools("node-user")
	for _, tc := range []struct{ instance, ns, object, caps string }{
		{"", "", "object rbdcsi.nodes in pool rbd:", "osd 'allow rwx pool=rbd object_prefix rbdcsi.nodes'"},
		{"k8s2", "tenant", "object rbdcsi.nodes.k8s2 in pool rbd, namespace tenant:", "osd 'allow rwx pool=rbd namespace=tenant object_prefix rbdcsi.nodes'"},
	} {
		p := rbd.Pool{MonHost: "mon", Name: "rbd", Namespace: tc.ns, Cred: cluster.Credentials{ID: "node-user", Key: "AQBub2Rla2V5bm9kZWtleQ=="}}
		r := New(ceph, p, tc.instance, time.Minute)
		err := r.Beat(context.Background(), Node{ID: "n1"})
		if !errors.Is(err, rbd.ErrPermission) {
			t.Fatalf("Beat: %v, want a refusal", err)
		}
		for _, w := range []string{"Ceph refused client.node-user on " + tc.object, tc.caps, cluster.CapsDoc} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "profile rbd") {
			t.Errorf("%q names the driver user's caps", err)
		}
	}
}
