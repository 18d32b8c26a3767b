package rbdtest

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// networkFencer and usage are what the csi-addons services ask of a
// backend beyond rbd.Backend (internal/addons); both implementations
// have them.
type networkFencer interface {
	BlocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix, expire time.Duration) error
	UnblocklistNetwork(ctx context.Context, monHost string, cred cluster.Credentials, prefix netip.Prefix) error
	BlocklistedNetworks(ctx context.Context, monHost string, cred cluster.Credentials) ([]netip.Prefix, error)
	ClientAddress(ctx context.Context, monHost string, cred cluster.Credentials) (string, netip.Addr, error)
}

type usage interface {
	UsedBytes(ctx context.Context, p rbd.Pool, name string) (uint64, error)
}

// A host and a block are fenced (the CSI user may), a repeat is fine,
// both are listed as what they are and an instance entry is not; lifted,
// also twice, they are gone. The backend names its cluster and address.
// The blocks hold no client of the tests' (loopback 127.0.0.1).
func testNetworkFences(t *testing.T, s *suite) {
	f, ok := s.Backend.(networkFencer)
	if !ok {
		t.Fatalf("%T has no network fences", s.Backend)
	}
	p := s.Pool
	host, block := netip.MustParsePrefix("127.0.0.77/32"), netip.MustParsePrefix("127.0.0.64/28")
	instance := "127.0.0.78:0/4242"
	s.wantErr(f.BlocklistNetwork(s.ctx(), p.MonHost, p.Cred, host, 0), "BlocklistNetwork without an expiry", rbd.ErrInvalid)
	t.Cleanup(func() {
		_ = f.UnblocklistNetwork(s.ctx(), p.MonHost, s.Unblocklister, host)
		_ = f.UnblocklistNetwork(s.ctx(), p.MonHost, s.Unblocklister, block)
		_ = s.Backend.Unblocklist(s.ctx(), p.MonHost, s.Unblocklister, instance)
	})
	for range 2 {
		s.must(f.BlocklistNetwork(s.ctx(), p.MonHost, p.Cred, host, time.Hour), "BlocklistNetwork of a host")
		s.must(f.BlocklistNetwork(s.ctx(), p.MonHost, p.Cred, block, time.Hour), "BlocklistNetwork of a block")
	}
	s.must(s.Backend.Blocklist(s.ctx(), p.MonHost, p.Cred, instance, time.Hour), "Blocklist of an instance")
	listed, err := f.BlocklistedNetworks(s.ctx(), p.MonHost, p.Cred)
	s.must(err, "BlocklistedNetworks")
	if !slices.Contains(listed, host) || !slices.Contains(listed, block) || slices.Contains(listed, netip.MustParsePrefix("127.0.0.78/32")) {
		t.Fatalf("BlocklistedNetworks = %v, want %s and %s and no instance entry", listed, host, block)
	}
	for range 2 {
		s.must(f.UnblocklistNetwork(s.ctx(), p.MonHost, s.Unblocklister, host), "UnblocklistNetwork of the host")
		s.must(f.UnblocklistNetwork(s.ctx(), p.MonHost, s.Unblocklister, block), "UnblocklistNetwork of the block")
	}
	listed, err = f.BlocklistedNetworks(s.ctx(), p.MonHost, p.Cred)
	s.must(err, "BlocklistedNetworks")
	if slices.Contains(listed, host) || slices.Contains(listed, block) {
		t.Fatalf("after the lift: %v", listed)
	}
	fsid, addr, err := f.ClientAddress(s.ctx(), p.MonHost, p.Cred)
	if err != nil || fsid == "" || !addr.IsValid() {
		t.Fatalf("ClientAddress = %q, %v, %v", fsid, addr, err)
	}
}

// An image uses nothing until written; a write makes it use at least
// what was written and at most the objects it touched (Ceph counts whole
// 4 MiB objects, the fake bytes); a missing image is ErrNotFound.
func testUsedBytes(t *testing.T, s *suite) {
	u, ok := s.Backend.(usage)
	if !ok {
		t.Fatalf("%T has no UsedBytes", s.Backend)
	}
	name := s.name("img")
	s.create(name, 16*mib, nil)
	used, err := u.UsedBytes(s.ctx(), s.Pool, name)
	if err != nil || used != 0 {
		t.Fatalf("UsedBytes of a new image = %d, %v; want 0", used, err)
	}
	s.must(s.Backend.WriteAt(s.ctx(), s.Pool, name, 0, make([]byte, 4096)), "WriteAt")
	s.must(s.Backend.WriteAt(s.ctx(), s.Pool, name, 9*mib, make([]byte, 4096)), "WriteAt")
	used, err = u.UsedBytes(s.ctx(), s.Pool, name)
	if err != nil || used < 2*4096 || used > 8*mib {
		t.Fatalf("UsedBytes after two 4 KiB writes in two objects = %d, %v", used, err)
	}
	_, err = u.UsedBytes(s.ctx(), s.Pool, s.name("missing"))
	s.wantErr(err, "UsedBytes of a missing image", rbd.ErrNotFound)
}
