// Package ceph implements the storage contract (internal/rbd.Backend) on
// Ceph through go-ceph, the only package that links librbd and librados:
// cached cluster connections, images, snapshots, clones, metadata and
// RADOS objects. Every call is bounded by the caller's context and by
// librados' own op timeouts.
package ceph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ceph/go-ceph/rados"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Options tune the connection cache.
type Options struct {
	// OpTimeout bounds each librados operation (mon and osd ops, and the
	// initial connect), so an unreachable cluster never hangs a call.
	OpTimeout time.Duration
	// IdleTimeout closes a connection nobody used for this long.
	IdleTimeout time.Duration
}

// DefaultOptions suit a controller serving Kubernetes sidecars, whose
// default RPC timeout is 10-15 s.
func DefaultOptions() Options {
	return Options{OpTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
}

// Conns caches one librados connection per (monitors, user, key).
type Conns struct {
	opts Options
	keys keyTypes

	mu      sync.Mutex
	entries map[string]*connEntry
	closed  bool
	drained chan struct{} // closed when Close has shut every connection down
	stop    chan struct{}
	done    chan struct{}
}

type connEntry struct {
	ready    chan struct{} // closed once conn or err is set
	conn     *rados.Conn
	err      error
	refs     int
	lastUsed time.Time
}

// NewConns starts a cache; Close shuts its connections down.
func NewConns(opts Options) *Conns {
	c := &Conns{opts: opts, entries: map[string]*connEntry{}, stop: make(chan struct{}), done: make(chan struct{})}
	go c.reapIdle()
	return c
}

// Close shuts down every cached connection. One that a call still uses
// (a call its request gave up on, or a background task cut off by the
// shutdown) goes when that call returns: librados aborts the whole process
// when a connection is shut down under a running op. Close waits for that
// up to the op timeout, which bounds every op; past it, what is left stays
// up until the process ends.
func (c *Conns) Close() {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	c.closed = true
	c.drained = make(chan struct{})
	for k, e := range c.entries {
		if e.refs == 0 {
			c.shutdown(k, e)
		}
	}
	c.closeIfDrained()
	drained := c.drained
	c.mu.Unlock()
	select {
	case <-drained:
	case <-time.After(c.opts.OpTimeout + time.Second):
		klog.InfoS("calls still running on Ceph connections at shutdown; leaving those connections to the process's end", "connections", c.Len())
	}
}

// closeIfDrained must be called with c.mu held, after Close began.
func (c *Conns) closeIfDrained() {
	if len(c.entries) == 0 {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
}

func cacheKey(monHost string, cred cluster.Credentials) string {
	sum := sha256.Sum256([]byte(monHost + "\x00" + cred.ID + "\x00" + cred.Key))
	return hex.EncodeToString(sum[:])
}

// get returns a connected handle and a release function.
func (c *Conns) get(ctx context.Context, monHost string, cred cluster.Credentials) (*rados.Conn, func(), error) {
	key := cacheKey(monHost, cred)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, errClosed
	}
	e, ok := c.entries[key]
	if !ok {
		e = &connEntry{ready: make(chan struct{})}
		c.entries[key] = e
		go c.connect(key, e, monHost, cred)
	}
	e.refs++
	c.mu.Unlock()

	release := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		e.refs--
		e.lastUsed = time.Now()
		if c.closed && e.refs == 0 && c.entries[key] == e {
			c.shutdown(key, e)
			c.closeIfDrained()
		}
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		release()
		return nil, nil, fmt.Errorf("connecting to monitors %s: %w", monHost, wrapCtx(ctx.Err()))
	}
	if e.err != nil {
		release()
		return nil, nil, e.err
	}
	return e.conn, release, nil
}

// connect runs apart from any request, so a request that gives up does not
// leave a half-made entry; a failed entry is dropped for the next caller.
func (c *Conns) connect(key string, e *connEntry, monHost string, cred cluster.Credentials) {
	var conn *rados.Conn
	var err error
	if cred.KeyType() == cluster.KeyTypeAES256K && !c.keys.readsAES256K() {
		err = fmt.Errorf("connecting to monitors %s: %w: %s", monHost, rbd.ErrUnusableKey, cred.AES256KHint())
	} else {
		conn, err = dial(monHost, cred, c.opts.OpTimeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed && err == nil {
		conn.Shutdown()
		conn, err = nil, errClosed
	}
	e.conn, e.err, e.lastUsed = conn, err, time.Now()
	if err != nil && c.entries[key] == e {
		delete(c.entries, key)
	}
	if c.closed {
		c.closeIfDrained()
	}
	close(e.ready)
}

func dial(monHost string, cred cluster.Credentials, timeout time.Duration) (*rados.Conn, error) {
	conn, err := rados.NewConnWithUser(cred.ID)
	if err != nil {
		return nil, fmt.Errorf("creating Ceph client: %w", classify(err))
	}
	secs := strconv.Itoa(max(1, int(timeout.Seconds())))
	for _, o := range [][2]string{
		{"mon_host", monHost},
		{"key", cred.Key},
		{"keyring", "/dev/null"}, // never read a keyring from the node's disk
		{"client_mount_timeout", secs},
		{"rados_mon_op_timeout", secs},
		{"rados_osd_op_timeout", secs},
		{"admin_socket", ""},
		{"log_to_stderr", "false"},
		{"err_to_stderr", "false"},
	} {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			conn.Shutdown()
			return nil, unusableKey(cred, fmt.Errorf("setting Ceph option %s: %w", o[0], classify(err)))
		}
	}
	start := time.Now()
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		err = rbd.AuthRefused(monHost, cred, fmt.Errorf("connecting to monitors %s as %s: %w", monHost, cred, classify(err)))
		return nil, unusableKey(cred, err)
	}
	klog.V(4).InfoS("connected to Ceph", "monitors", monHost, "user", cred.ID, "took", time.Since(start))
	return conn, nil
}

// unusableKey marks a failure that an AES256K key explains (a client that
// reads such keys but a monitor that refuses them, say) as ErrUnusableKey.
func unusableKey(cred cluster.Credentials, err error) error {
	if hinted := cred.UnusableKey(err); hinted != err {
		return fmt.Errorf("%w: %w", rbd.ErrUnusableKey, hinted)
	}
	return err
}

func (c *Conns) reapIdle() {
	defer close(c.done)
	every := max(c.opts.IdleTimeout/4, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.mu.Lock()
			for k, e := range c.entries {
				select {
				case <-e.ready:
				default:
					continue // still connecting
				}
				if e.refs == 0 && now.Sub(e.lastUsed) > c.opts.IdleTimeout {
					c.shutdown(k, e)
				}
			}
			c.mu.Unlock()
		}
	}
}

// shutdown must be called with c.mu held.
func (c *Conns) shutdown(key string, e *connEntry) {
	delete(c.entries, key)
	if e.conn != nil {
		e.conn.Shutdown()
	}
}

// Len reports how many connections are cached (for tests and metrics).
func (c *Conns) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// ownAddrs returns the client addresses of the connections cached now,
// normalized (sameClient), so that a caller can tell this process's own
// watches from other clients'. A connection still connecting has no
// watch yet and is not asked.
func (c *Conns) ownAddrs() (map[string]bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	own := map[string]bool{}
	for _, e := range c.entries {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.conn == nil {
			continue
		}
		addrs, err := e.conn.GetAddrs()
		if err != nil {
			return nil, fmt.Errorf("reading the address of a Ceph connection: %w", classify(err))
		}
		for _, a := range clientAddrs(addrs) {
			own[a] = true
		}
	}
	return own, nil
}
