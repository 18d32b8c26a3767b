package controller

import (
	"fmt"
	"testing"
	"time"
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
