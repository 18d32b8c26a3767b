package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// pages keeps, between the pages of a paginated listing, the entries
// left after each page, keyed by the page's next_token. Listing a pool
// means walking all of it (every image name for ListVolumes, every
// image's snapshots for ListSnapshots); without this, each page walked
// everything again, and a complete listing of N entries in pages of P
// cost N/P walks. With it, a listing walks once, at its first page, and
// each later page reads only its own entries.
//
// What a listing left is kept for pagesTTL; a page asked for later, or
// by a token the controller no longer holds (another replica served the
// page before, or the controller restarted), walks again as the first
// page did: the listing stays complete either way. Later pages show what
// the first page's walk found, so a volume or snapshot made after it may
// be missing from that listing (CSI promises no consistent view across
// pages); ListVolumes still reads each entry of a page, so a volume
// deleted meanwhile is left out.
type pages[T any] struct {
	mu   sync.Mutex
	now  func() time.Time
	left map[string]pagesLeft[T]
}

type pagesLeft[T any] struct {
	rest []T
	at   time.Time
}

const (
	// pagesTTL: how long what a listing left is kept for its next page.
	pagesTTL = time.Minute
	// pagesMax bounds how many listings' rests are kept at once; the
	// oldest goes first.
	pagesMax = 32
)

func newPages[T any]() *pages[T] {
	return &pages[T]{now: time.Now, left: map[string]pagesLeft[T]{}}
}

// put keeps rest, what follows the page whose next_token is token, for
// the caller of scope (pagesScope).
func (p *pages[T]) put(scope, token string, rest []T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	oldest := ""
	for k, l := range p.left {
		if now.Sub(l.at) > pagesTTL {
			delete(p.left, k)
		} else if oldest == "" || l.at.Before(p.left[oldest].at) {
			oldest = k
		}
	}
	if len(p.left) >= pagesMax {
		delete(p.left, oldest)
	}
	p.left[scope+"\x00"+token] = pagesLeft[T]{rest: rest, at: now}
}

// get returns what follows token, if a page of this scope left it
// within pagesTTL. It stays for a retry of the same page, unless that was
// the listing's last (drop).
func (p *pages[T]) get(scope, token string) ([]T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.left[scope+"\x00"+token]
	if !ok || p.now().Sub(l.at) > pagesTTL {
		return nil, false
	}
	return l.rest, true
}

// drop forgets what followed token: the listing's last page took it.
func (p *pages[T]) drop(scope, token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.left, scope+"\x00"+token)
}

// pagesScope tells apart the listings of callers with different secrets,
// which may see different pools: a hash, so the keys are not kept.
func pagesScope(secrets map[string]string) string {
	if len(secrets) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(secrets[cluster.SecretUserID] + "\x00" + secrets[cluster.SecretUserKey]))
	return hex.EncodeToString(sum[:])
}
