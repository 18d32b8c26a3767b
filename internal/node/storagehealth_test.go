package node

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/mapper"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// poolAnswers answers PoolHealth by "monHost/pool".
type poolAnswers map[string]struct {
	h   rbd.PoolHealth
	err error
}

func (a poolAnswers) PoolHealth(_ context.Context, p rbd.Pool) (rbd.PoolHealth, error) {
	r := a[p.MonHost+"/"+p.Name]
	return r.h, r.err
}

// Each cluster is asked about the pools staged from it, or about none;
// what it answers becomes one condition, a healthy answer none.
func TestStorageHealthConditions(t *testing.T) {
	clusters := cluster.NewStaticMap([]cluster.Cluster{
		{ClusterID: "c1", Monitors: []string{"10.0.0.1:3300"}},
		{ClusterID: "down", Monitors: []string{"10.0.0.2:3300"}},
		{ClusterID: "refusing", Monitors: []string{"10.0.0.3:3300"}},
	})
	n := &Node{clusters: clusters, store: &store{dir: t.TempDir()}, cred: &cluster.Credentials{ID: "node", Key: testKey},
		pools: poolAnswers{
			"10.0.0.1:3300/rbd": {h: rbd.PoolHealth{Full: true, Quota: true}},
			"10.0.0.2:3300/":    {err: fmt.Errorf("%w: timed out", rbd.ErrUnavailable)},
			"10.0.0.3:3300/":    {err: fmt.Errorf("%w: mon refused", rbd.ErrPermission)},
		}}
	if err := n.store.save(&record{VolumeID: volID, Staged: true, Image: mapper.Image{ClusterID: "c1", Pool: "rbd", Name: "csi-vol-1"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := n.NodeGetStorageHealth(context.Background(), &csi.NodeGetStorageHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range resp.GetBackendHealth() {
		got = append(got, b.GetStatus().String()+" "+b.GetReason())
	}
	want := "STORAGE_DEGRADED PoolFull; STORAGE_UNREACHABLE ClusterUnreachable; STORAGE_UNREACHABLE NodeUserRefused"
	if strings.Join(got, "; ") != want {
		t.Fatalf("conditions %q, want %q", got, want)
	}
	n.cred = nil
	_, err = n.NodeGetStorageHealth(context.Background(), &csi.NodeGetStorageHealthRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a node user: %v, want Unimplemented", err)
	}
}
