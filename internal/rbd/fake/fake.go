// Package fake is an in-memory Ceph that implements the storage contract
// (internal/rbd.Backend) the way RBD does: images in a pool directory,
// snapshots in the user, group and trash namespaces, groups and their
// snapshots, format 2 clones linked to their parent's snapshot, image
// metadata, and RADOS objects with data and omap. It keeps no image data.
// The contract suite (internal/rbd/rbdtest) runs against it and against
// real Ceph, so the two cannot drift apart.
//
// Beyond the contract it offers hooks that make the states a crash or
// another client leaves (Watch, RemoveHeader, DetachBehind, SetFull,
// IncompleteGroupSnap) and the refusals of users without the caps a call
// needs (RejectUser, DenyPools, FailBlocklist), for tests of the code
// above it.
package fake

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Options configure a Ceph.
type Options struct {
	// Pools that exist, each with its default RBD namespace. Default: "rbd".
	Pools []string
	// Available is what PoolAvailable reports. Default: 100 GiB.
	Available int64
	// Fault is called at the same named points as the real backend's
	// ("CreateImage:created", "Clone:cloned"), between the steps of a
	// multi-step operation; a test makes a crash there with
	// runtime.Goexit. Nil: no faults.
	Fault func(point string)
	// Now is the clock of creation times. Default: time.Now.
	Now func() time.Time
	// NoGroupSnapshots makes a client whose library lacks group snapshots,
	// as Pacific's and Reef's librbd: GroupSnapshots, every other call of
	// rbd.GroupBackend and a clone by ParentSnapID are ErrNotSupported.
	NoGroupSnapshots bool
}

// Ceph is a client of one in-memory cluster. It is safe for concurrent use.
type Ceph struct {
	*shared
	fault func(string)
	// addr is this client's address, as Watchers and the blocklist name it.
	addr string
	// groupSnaps is what GroupSnapshots answers.
	groupSnaps error
}

// shared is the state every client of one fake cluster shares.
type shared struct {
	now   func() time.Time
	avail int64

	mu     sync.Mutex
	pools  map[string]*pool
	nextID uint64
	// nonces numbers the clients (client addresses).
	nonces uint64
	// blocklist holds the barred client addresses and when each entry
	// expires; blocklistErr, when set, is what Blocklist fails with.
	blocklist    map[string]time.Time
	blocklistErr error
	// rejected are the users the monitors refuse to authenticate,
	// poolless those whose caps cover no pool (hooks.go: RejectUser,
	// DenyPools).
	rejected, poolless map[string]bool
	// schedules are the images' mirror snapshot schedules, by
	// pool/namespace/image ID, as the mgr keys them.
	schedules map[string][]rbd.MirrorSchedule
}

type pool struct {
	full     bool
	nearFull bool
	inactive int // placement groups stuck inactive
	// mirrorMode is the pool's mirror mode ("" disabled, "image");
	// peered, whether it has a mirror peer (mirrorhooks.go).
	mirrorMode string
	peered     bool
	// rbdNS are the RBD namespaces made in the pool ("" always exists).
	rbdNS  map[string]bool
	spaces map[string]*space // by RADOS namespace
}

// space is one RADOS namespace of a pool.
type space struct {
	dir     map[string]string // image name -> ID, the pool directory
	images  map[string]*image // by ID; a directory entry without one is headerless
	objects map[string]*object
	groups  map[string]*group // by name
}

type image struct {
	id, name string
	size     uint64
	features []string // sorted
	meta     map[string]string
	created  time.Time
	snaps    []*snapshot // by ID, ascending
	parent   *link
	// data is where the image was written (data.go); overlap, for a
	// clone, is how many of its first bytes read the parent's data.
	data    extentMap
	overlap uint64
	// watchers are the addresses of the clients that have it open;
	// locker is the one holding its exclusive lock ("": none).
	watchers []string
	locker   string
	// sparsified counts Sparsify calls (the fake keeps no data).
	sparsified int
	// group is the group the image is in, if any.
	group *group
	// mirror is its mirroring, nil when not mirrored (mirror.go).
	mirror *mirror
}

// link ties a clone to the snapshot it depends on.
type link struct {
	pool, ns, imageID string
	snapID            uint64
}

type snapshot struct {
	id      uint64
	name    string
	trash   bool // in the RBD trash namespace: deleted while clones need it
	size    uint64
	created time.Time
	// children are the clones depending on the snapshot, by childKey.
	children map[string]bool
	// group, when set, is the ID of the group snapshot this snapshot was
	// taken in: it is in the RBD group namespace, not the user's.
	group string
	// data, parent and overlap are the image's when it was taken.
	data    extentMap
	parent  *link
	overlap uint64
}

type object struct {
	data []byte
	omap map[string]string
}

// New returns an empty cluster with the given pools.
func New(o Options) *Ceph {
	if len(o.Pools) == 0 {
		o.Pools = []string{"rbd"}
	}
	if o.Available == 0 {
		o.Available = 100 << 30
	}
	if o.Fault == nil {
		o.Fault = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	cl := &shared{now: o.Now, avail: o.Available, pools: map[string]*pool{}, blocklist: map[string]time.Time{},
		rejected: map[string]bool{}, poolless: map[string]bool{}, schedules: map[string][]rbd.MirrorSchedule{}}
	c := &Ceph{shared: cl, fault: o.Fault, addr: cl.newAddr()}
	if o.NoGroupSnapshots {
		c.groupSnaps = fmt.Errorf("%w: this fake client's library has no group snapshots (Options.NoGroupSnapshots, as Pacific's and Reef's librbd)", rbd.ErrNotSupported)
	}
	for _, p := range o.Pools {
		c.AddPool(p)
	}
	return c
}

// Client is another client of the same cluster, with a fault hook of its
// own: a process about to crash beside a healthy one. Nil: no faults. It
// has the same library as c (NoGroupSnapshots).
func (c *Ceph) Client(fault func(point string)) *Ceph {
	if fault == nil {
		fault = func(string) {}
	}
	return &Ceph{shared: c.shared, fault: fault, addr: c.newAddr(), groupSnaps: c.groupSnaps}
}

// newAddr makes the address of a new client instance: the same host,
// another nonce, as real clients get.
func (c *shared) newAddr() string { return c.newAddrAt(netip.MustParseAddr(localIP)) }

// localIP is the host of this fake's own clients (ClientAddress reports it).
const localIP = "127.0.0.1"

// newAddrAt makes the address of a new client instance on the host at ip.
func (c *shared) newAddrAt(ip netip.Addr) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nonces++
	return netip.AddrPortFrom(ip, 0).String() + "/" + strconv.FormatUint(c.nonces, 10)
}

// Ceph is a Backend.
var _ rbd.Backend = (*Ceph)(nil)

// AddPool makes a pool (rbd pool init included); an existing one stays.
func (c *Ceph) AddPool(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pools[name] == nil {
		c.pools[name] = &pool{rbdNS: map[string]bool{"": true}, spaces: map[string]*space{}}
	}
}

// AddNamespace makes an RBD namespace in a pool (rbd namespace create).
func (c *Ceph) AddNamespace(poolName, ns string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pl := c.pools[poolName]
	if pl == nil {
		return fmt.Errorf("%w: pool %q", rbd.ErrPoolNotFound, poolName)
	}
	pl.rbdNS[ns] = true
	return nil
}

// begin checks the context and takes the cluster lock; the caller
// unlocks. A context that ended is what an unanswered call yields.
func (c *Ceph) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("Ceph did not answer before the request's deadline: %w", err)
	}
	c.mu.Lock()
	return nil
}

// connect refuses a user the monitors do not let in (RejectUser), as
// the real backend's connection does. Called with c.mu held.
func (c *Ceph) connect(monHost string, cred cluster.Credentials) error {
	if !c.rejected[cred.ID] {
		return nil
	}
	err := fmt.Errorf("connecting to monitors %s as %s: %w: fake: the user is rejected", monHost, cred, rbd.ErrPermission)
	return rbd.AuthRefused(monHost, cred, err)
}

// space returns the pool's RADOS namespace, made on first use as RADOS
// does. Every call on a pool comes here first, so this is where a user is
// refused as the OSDs refuse one (DenyPools). Called with c.mu held.
func (c *Ceph) space(p rbd.Pool) (*space, error) {
	if err := c.connect(p.MonHost, p.Cred); err != nil {
		return nil, err
	}
	if c.poolless[p.Cred.ID] {
		return nil, rbd.RefusedOn(p, fmt.Errorf("%w: fake: the user's caps cover no pool", rbd.ErrPermission))
	}
	pl := c.pools[p.Name]
	if pl == nil {
		return nil, fmt.Errorf("%w: pool %q", rbd.ErrPoolNotFound, p.Name)
	}
	s := pl.spaces[p.Namespace]
	if s == nil {
		s = &space{dir: map[string]string{}, images: map[string]*image{}, objects: map[string]*object{}, groups: map[string]*group{}}
		pl.spaces[p.Namespace] = s
	}
	return s, nil
}

// imageSpace is space for image operations, which need the RBD namespace
// to exist. Called with c.mu held.
func (c *Ceph) imageSpace(p rbd.Pool) (*space, error) {
	s, err := c.space(p)
	if err != nil {
		return nil, err
	}
	if !c.pools[p.Name].rbdNS[p.Namespace] {
		return nil, fmt.Errorf("%w: %w: %q in pool %q", rbd.ErrPoolNotFound, rbd.ErrNamespaceNotFound, p.Namespace, p.Name)
	}
	return s, nil
}

// named finds an image with a header and its space. Called with c.mu held.
func (c *Ceph) named(p rbd.Pool, name string) (*space, *image, error) {
	s, err := c.space(p)
	if err != nil {
		return nil, nil, err
	}
	img, err := s.byName(name)
	if err != nil {
		return nil, nil, err
	}
	return s, img, nil
}

// byName finds an image with a header. Called with c.mu held.
func (s *space) byName(name string) (*image, error) {
	id, ok := s.dir[name]
	if !ok || s.images[id] == nil {
		return nil, fmt.Errorf("%w: image %s", rbd.ErrNotFound, name)
	}
	return s.images[id], nil
}

func (s *space) byID(id string) (*image, error) {
	img := s.images[id]
	if img == nil {
		return nil, fmt.Errorf("%w: image id %s", rbd.ErrNotFound, id)
	}
	return img, nil
}

// ListPools returns the pool names, sorted.
func (c *Ceph) ListPools(ctx context.Context, monHost string, cred cluster.Credentials) ([]string, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.connect(monHost, cred); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(c.pools))
	for n := range c.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// PoolAvailable reports Options.Available, 0 for a full pool.
func (c *Ceph) PoolAvailable(ctx context.Context, p rbd.Pool) (int64, error) {
	if err := c.begin(ctx); err != nil {
		return 0, err
	}
	defer c.mu.Unlock()
	if err := c.connect(p.MonHost, p.Cred); err != nil {
		return 0, err
	}
	pl := c.pools[p.Name]
	switch {
	case pl == nil:
		return 0, fmt.Errorf("%w: pool %q", rbd.ErrPoolNotFound, p.Name)
	case pl.full:
		return 0, nil
	}
	return c.avail, nil
}

// PoolHealth reports SetFull (as a quota), SetNearFull and
// SetInactivePGs; a missing pool
// is neither, as in `osd dump`.
func (c *Ceph) PoolHealth(ctx context.Context, p rbd.Pool) (rbd.PoolHealth, error) {
	if err := c.begin(ctx); err != nil {
		return rbd.PoolHealth{}, err
	}
	defer c.mu.Unlock()
	if err := c.connect(p.MonHost, p.Cred); err != nil {
		return rbd.PoolHealth{}, err
	}
	pl := c.pools[p.Name]
	if pl == nil {
		return rbd.PoolHealth{}, nil
	}
	h := rbd.PoolHealth{Full: pl.full, Quota: pl.full, NearFull: pl.nearFull, InactivePGs: pl.inactive}
	if pl.inactive > 0 {
		h.InactiveState = "undersized+peered"
	}
	return h, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
