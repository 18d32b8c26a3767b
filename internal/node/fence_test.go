package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// stubFence answers Stat with fixed metadata (of the image with RBD ID
// stubImageID) or a fixed error.
type stubFence struct {
	meta map[string]string
	err  error
}

const stubImageID = "10b2c3d4"

func (f stubFence) Stat(context.Context, rbd.Pool, string) (rbd.ImageInfo, error) {
	return rbd.ImageInfo{ID: stubImageID, Metadata: f.meta}, f.err
}

func TestCheckAttached(t *testing.T) {
	vol, err := volid.DecodeVolume(volID)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]string{attach.MetaPrefix + "n1": "rw:SINGLE_NODE_WRITER"}
	other := map[string]string{attach.MetaPrefix + "n2": "rw:SINGLE_NODE_WRITER"}
	rwo := attach.Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	oursTagged := map[string]string{attach.MetaPrefix + "n1": rwo.Value(stubImageID)}
	// A record that came with the metadata of the peer's copy (rbd-mirror)
	// or of a parent: it names another image, and attaches nothing here.
	fromPeer := map[string]string{attach.MetaPrefix + "n1": rwo.Value("a0a0a0a0")}
	for _, c := range []struct {
		name  string
		fence stubFence
		mode  string
		want  codes.Code
	}{
		{"attached here", stubFence{meta: ours}, "SINGLE_NODE_WRITER", codes.OK},
		{"attached here, on this image", stubFence{meta: oursTagged}, "SINGLE_NODE_WRITER", codes.OK},
		{"attached elsewhere", stubFence{meta: other}, "SINGLE_NODE_WRITER", codes.FailedPrecondition},
		{"attached on the peer's copy", stubFence{meta: fromPeer}, "SINGLE_NODE_WRITER", codes.FailedPrecondition},
		{"multi-node modes are not fenced", stubFence{meta: other}, "MULTI_NODE_MULTI_WRITER", codes.OK},
		{"image gone", stubFence{err: fmt.Errorf("stat: %w", rbd.ErrNotFound)}, "SINGLE_NODE_WRITER", codes.NotFound},
		{"pool gone", stubFence{err: fmt.Errorf("stat: %w", rbd.ErrPoolNotFound)}, "SINGLE_NODE_WRITER", codes.NotFound},
		{"Ceph unreachable", stubFence{err: fmt.Errorf("stat: %w", rbd.ErrUnavailable)}, "SINGLE_NODE_WRITER", codes.Unavailable},
		{"Ceph too slow", stubFence{err: fmt.Errorf("stat: %w", context.DeadlineExceeded)}, "SINGLE_NODE_WRITER", codes.Unavailable},
		{"call cancelled", stubFence{err: fmt.Errorf("stat: %w", context.Canceled)}, "SINGLE_NODE_WRITER", codes.Canceled},
		{"anything else", stubFence{err: errors.New("stat: odd")}, "SINGLE_NODE_WRITER", codes.Internal},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &Node{id: "n1", fence: c.fence}
			err := n.checkAttached(context.Background(), vol, cluster.Cluster{ClusterID: "c1"}, cluster.Credentials{}, c.mode)
			if got := status.Code(err); got != c.want {
				t.Fatalf("checkAttached = %v (code %v), want %v", err, got, c.want)
			}
		})
	}
}
