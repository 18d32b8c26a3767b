package node

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// hostAddr is the backend's ClientAddress: the IP it is set to, or err.
type hostAddr struct {
	ip    netip.Addr
	err   error
	asked []string // "<monHost> <user>"
}

func (h *hostAddr) ClientAddress(_ context.Context, monHost string, cred cluster.Credentials) (string, netip.Addr, error) {
	h.asked = append(h.asked, monHost+" "+cred.ID)
	return "fsid", h.ip, h.err
}

// addrLog is the registry's SetClientIP: it records each write, or fails.
type addrLog struct {
	writes []string // "<node> <clusterID> <ip>"
	err    error
}

func (a *addrLog) SetClientIP(_ context.Context, nodeID, clusterID string, ip netip.Addr) error {
	if a.err != nil {
		return a.err
	}
	a.writes = append(a.writes, nodeID+" "+clusterID+" "+ip.String())
	return nil
}

func withAddresses(f *fixture, ip string) (*hostAddr, *addrLog) {
	h, a := &hostAddr{ip: netip.MustParseAddr(ip)}, &addrLog{}
	f.n.clientAddr, f.n.addrReg = h, a
	return h, a
}

// stageAndUnstage stages the volume (raw block), then unstages it.
func (f *fixture) stageAndUnstage(t *testing.T, what string) {
	t.Helper()
	req := f.stageReq(&csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	})
	if _, err := f.n.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := f.unstage(req.StagingTargetPath); err != nil {
		t.Fatalf("%s: unstage: %v", what, err)
	}
}

// A stage records the node's address toward the volume's cluster, asked
// of the cluster with the stage's user; a stage again writes nothing while
// it is the same, and the new one once it changed.
func TestStageRecordsTheClientAddress(t *testing.T) {
	f := newFixture(t)
	h, a := withAddresses(f, "10.0.0.5")
	f.stageAndUnstage(t, "stage")
	f.stageAndUnstage(t, "stage again")
	if want := "n1 c1 10.0.0.5"; len(a.writes) != 1 || a.writes[0] != want {
		t.Fatalf("registry writes %v, want one: %s", a.writes, want)
	}
	if len(h.asked) != 2 || h.asked[0] != "v2:10.0.0.1:3300 csi-rbd" {
		t.Fatalf("address asked %v, want at each stage, of the volume's cluster as the stage's user", h.asked)
	}
	h.ip = netip.MustParseAddr("10.0.0.6")
	f.stageAndUnstage(t, "stage at a new address")
	if len(a.writes) != 2 || a.writes[1] != "n1 c1 10.0.0.6" {
		t.Fatalf("registry writes %v, want the changed address recorded", a.writes)
	}
}

// An address that cannot be read or recorded fails no stage (the
// controller then fences every client), and the next stage tries again.
func TestStageSucceedsWithoutRecordingTheAddress(t *testing.T) {
	f := newFixture(t)
	h, a := withAddresses(f, "10.0.0.5")
	h.err = errors.New("the monitors do not answer")
	f.stageAndUnstage(t, "stage whose address cannot be read")
	h.err, a.err = nil, errors.New("access denied")
	f.stageAndUnstage(t, "stage whose address cannot be recorded")
	if len(a.writes) != 0 {
		t.Fatalf("writes %v", a.writes)
	}
	a.err = nil
	f.stageAndUnstage(t, "stage once the registry takes it")
	if len(a.writes) != 1 {
		t.Fatalf("registry writes %v: a failed record is tried again at the next stage", a.writes)
	}
}
