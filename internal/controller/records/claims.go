package records

import (
	"context"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// claimPrefix names the RADOS object that ties a snapshot name to its
// source image, so a name reused for another source is refused.
const claimPrefix = "rbdcsi.snap."

// ClaimObject names the claim of an RBD snapshot name.
func ClaimObject(snap string) string { return claimPrefix + snap }

// claimIndex is an omap object listing the snapshot claims whose
// CreateSnapshot has not settled yet: key the RBD snapshot name, value
// "<unix time> <source image ID> <request name>". Claims are objects of
// their own, which only a scan of every object in the pool could find; the
// index lets the sweep find the claim of a CreateSnapshot that crashed
// and was never retried.
const claimIndex = "rbdcsi.snapclaims" // one per instance: Names.Object

// Claims is the instance's index of unsettled snapshot claims.
type Claims struct{ x WorkIndex }

// NewClaims is the instance's claim index.
func NewClaims(backend rbd.Backend, n Names) Claims {
	return Claims{x: NewWorkIndex(backend, n.Object(claimIndex))}
}

// Claim is one indexed claim; ImageID "" (or a zero At) marks an entry
// that is not ours to read.
type Claim struct {
	Snap, ImageID, Name string
	At                  time.Time
}

// Add records a claim about to be made: of snap, for the source image
// imageID, by the CreateSnapshot request name.
func (c Claims) Add(ctx context.Context, pool rbd.Pool, snap, imageID, name string) error {
	return c.x.Add(ctx, pool, snap, imageID+" "+name)
}

// Settle drops a claim's entry once its fate is known.
func (c Claims) Settle(ctx context.Context, pool rbd.Pool, snap string) error {
	return c.x.Drop(ctx, pool, snap)
}

// List returns the indexed claims.
func (c Claims) List(ctx context.Context, pool rbd.Pool) ([]Claim, error) {
	entries, err := c.x.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := make([]Claim, 0, len(entries))
	for _, e := range entries {
		imageID, name, _ := strings.Cut(e.Details, " ")
		out = append(out, Claim{Snap: e.Key, ImageID: imageID, Name: name, At: e.At})
	}
	return out, nil
}

// staticTmpIndex is an omap object listing the static volumes' images a
// clone took a temporary snapshot of: key the image name, value the unix
// time of the latest. The sweep reads only the driver's own images, so
// without it a clone abandoned after a crash would leave its temporary
// snapshot on a static image for good.
const staticTmpIndex = "rbdcsi.statictmp" // one per instance: Names.Object

// NewStaticTmps is the instance's index of static images with temporary
// snapshots: key the image name, no details.
func NewStaticTmps(backend rbd.Backend, n Names) WorkIndex {
	return NewWorkIndex(backend, n.Object(staticTmpIndex))
}
