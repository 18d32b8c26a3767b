package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/controller"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// counting counts the backend calls that walk a pool or read an image.
type counting struct {
	rbd.Backend
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
}

func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *counting) ListImages(ctx context.Context, p rbd.Pool) ([]string, error) {
	c.count("ListImages")
	return c.Backend.ListImages(ctx, p)
}

func (c *counting) Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error) {
	c.count("Stat")
	return c.Backend.Stat(ctx, p, name)
}

func (c *counting) StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error) {
	c.count("StatFamily")
	return c.Backend.StatFamily(ctx, p, name, id)
}

// listingEnv is a controller over a counting backend, with 7 volumes, 5
// of them with a snapshot.
func listingEnv(t *testing.T) (*env, *ctrl, *counting, []string) {
	e := newEnv(t)
	cnt := &counting{calls: map[string]int{}}
	e.wrap = func(b rbd.Backend) rbd.Backend { cnt.Backend = b; return cnt }
	c := e.start("", controller.Options{Credentials: ownCreds()})
	var vols []string
	for i := range 7 {
		v := c.mustCreate(t, fmt.Sprintf("list-%d", i), nil)
		vols = append(vols, v)
		if i < 5 {
			c.mustSnapshot(t, fmt.Sprintf("list-snap-%d", i), v)
		}
	}
	cnt.take()
	return e, c, cnt, vols
}

func listVolumes(t *testing.T, c *ctrl, token string) *csi.ListVolumesResponse {
	t.Helper()
	resp, err := c.c.ListVolumes(ctx(t), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
	must(t, err, "ListVolumes")
	return resp
}

// A complete listing walks the pool once, whatever its number of pages,
// and reads each volume once.
func TestListVolumesWalksThePoolOncePerListing(t *testing.T) {
	_, c, cnt, vols := listingEnv(t)
	var got []string
	pages, token, last := 0, "", ""
	for {
		resp := listVolumes(t, c, token)
		for _, en := range resp.Entries {
			got = append(got, en.Volume.VolumeId)
		}
		pages++
		if resp.NextToken == "" {
			last = token
			break
		}
		token = resp.NextToken
	}
	if len(got) != len(vols) || pages != 4 {
		t.Fatalf("%d volumes in %d pages, want %d in 4", len(got), pages, len(vols))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("not in ID order or repeated: %v", got)
		}
	}
	if calls := cnt.take(); calls["ListImages"] != 1 || calls["Stat"] != len(vols) {
		t.Fatalf("a listing of %d pages made %v; want 1 ListImages and %d Stat", pages, calls, len(vols))
	}
	// The last page let go of what it took: asked again, it walks again,
	// with the same answer.
	again := listVolumes(t, c, last)
	if calls := cnt.take(); calls["ListImages"] != 1 || len(again.Entries) != 1 || again.Entries[0].Volume.VolumeId != got[len(got)-1] {
		t.Fatalf("the last page again: %v with %v", again.Entries, calls)
	}
}

// A later page served by a controller that did not serve the first (a
// restart, another replica) walks again and goes on where the token says;
// one of a volume deleted since the first page leaves it out.
func TestListVolumesLaterPagesStayRight(t *testing.T) {
	e, c, cnt, vols := listingEnv(t)
	first := listVolumes(t, c, "")
	other := e.start("", controller.Options{Credentials: ownCreds()})
	cnt.take()
	second := listVolumes(t, other, first.NextToken)
	if calls := cnt.take(); calls["ListImages"] != 1 {
		t.Fatalf("a page without the first's walk made %v; want a walk", calls)
	}
	if len(second.Entries) != 2 || second.Entries[0].Volume.VolumeId <= first.NextToken {
		t.Fatalf("second page from another controller: %v after %s", second.Entries, first.NextToken)
	}
	// The first controller's next page takes what its first page's walk
	// left, and still reads each entry: a deleted volume is not listed.
	gone := second.Entries[0].Volume.VolumeId
	c.delete(t, gone)
	cnt.take()
	again := listVolumes(t, c, first.NextToken)
	if calls := cnt.take(); calls["ListImages"] != 0 {
		t.Fatalf("the first controller's second page walked again: %v", calls)
	}
	for _, en := range again.Entries {
		if en.Volume.VolumeId == gone {
			t.Fatalf("deleted volume %s listed", gone)
		}
	}
	if len(again.Entries) != 2 || len(vols) != 7 {
		t.Fatalf("second page after a delete: %v", again.Entries)
	}
}

// A complete unfiltered ListSnapshots reads each image once, whatever its
// number of pages; filtered ones read only their image.
func TestListSnapshotsWalksOncePerListing(t *testing.T) {
	_, c, cnt, vols := listingEnv(t)
	seen, pages, token := map[string]bool{}, 0, ""
	for {
		resp, err := c.c.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: token, Secrets: secrets()})
		must(t, err, "ListSnapshots")
		for _, en := range resp.Entries {
			if seen[en.Snapshot.SnapshotId] || en.Snapshot.SnapshotId <= token {
				t.Fatalf("snapshot %s repeated or out of order", en.Snapshot.SnapshotId)
			}
			seen[en.Snapshot.SnapshotId] = true
		}
		pages++
		if token = resp.NextToken; token == "" {
			break
		}
	}
	if len(seen) != 5 || pages != 3 {
		t.Fatalf("%d snapshots over %d pages, want 5 over 3", len(seen), pages)
	}
	if calls := cnt.take(); calls["ListImages"] != 1 || calls["StatFamily"] != len(vols) {
		t.Fatalf("a listing of %d pages made %v; want 1 ListImages and %d StatFamily", pages, calls, len(vols))
	}
	resp, err := c.c.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{SourceVolumeId: vols[0], MaxEntries: 1, Secrets: secrets()})
	must(t, err, "ListSnapshots by source")
	if len(resp.Entries) != 1 || resp.NextToken != "" {
		t.Fatalf("by source: %v, token %q", resp.Entries, resp.NextToken)
	}
	if calls := cnt.take(); calls["ListImages"] != 0 {
		t.Fatalf("a listing by source walked the pool: %v", calls)
	}
}
