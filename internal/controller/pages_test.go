package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPagesKeepWhatAListingLeftForAWhile(t *testing.T) {
	p := newPages[int]()
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	p.put("", "t1", []int{3, 4})
	if rest, ok := p.get("", "t1"); !ok || len(rest) != 2 {
		t.Fatalf("get t1: %v %v", rest, ok)
	}
	if _, ok := p.get("", "t1"); !ok {
		t.Fatal("a retried page found nothing")
	}
	if _, ok := p.get("other", "t1"); ok {
		t.Fatal("another caller's scope got the listing")
	}
	p.put("", "t2", []int{5})
	p.drop("", "t2")
	if _, ok := p.get("", "t2"); ok {
		t.Fatal("a dropped listing was kept")
	}
	now = now.Add(pagesTTL + time.Second)
	if _, ok := p.get("", "t1"); ok {
		t.Fatal("kept past the TTL")
	}
	for i := range pagesMax + 5 {
		now = now.Add(time.Millisecond)
		p.put("", fmt.Sprint(i), []int{i})
	}
	if len(p.left) > pagesMax {
		t.Fatalf("%d listings kept, max %d", len(p.left), pagesMax)
	}
	if _, ok := p.get("", "0"); ok {
		t.Fatal("the oldest listing was not the one dropped")
	}
	if _, ok := p.get("", fmt.Sprint(pagesMax+4)); !ok {
		t.Fatal("the newest listing was dropped")
	}
}

func TestPagesScopeHidesTheKey(t *testing.T) {
	s := pagesScope(map[string]string{"userID": "csi", "userKey": "AQAAsecret=="})
	if s == "" || s == pagesScope(map[string]string{"userID": "csi", "userKey": "AQAAother=="}) || pagesScope(nil) != "" {
		t.Fatalf("scopes do not tell callers apart: %q", s)
	}
	if len(s) != 64 {
		t.Fatalf("scope %q is not a hash", s)
	}
}

func TestReadAll(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]bool{}
	err := readAll(context.Background(), 50, func(_ context.Context, i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i] = true
		return nil
	})
	if err != nil || len(seen) != 50 {
		t.Fatalf("read %d of 50: %v", len(seen), err)
	}
	broken := errors.New("broken")
	var after atomic.Int64
	err = readAll(context.Background(), 1000, func(ctx context.Context, i int) error {
		if i == 3 {
			return broken
		}
		if ctx.Err() != nil {
			after.Add(1)
		}
		return nil
	})
	if !errors.Is(err, broken) {
		t.Fatalf("got %v, want the failed read's error", err)
	}
	if after.Load() > listReads {
		t.Fatalf("%d reads started after the failure was known", after.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := readAll(ctx, 10, func(context.Context, int) error { return nil }); status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled listing returned %v, want Canceled", err)
	}
	if err := readAll(context.Background(), 0, nil); err != nil {
		t.Fatalf("no reads: %v", err)
	}
}
