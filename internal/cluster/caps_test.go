package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The caps are spelt as docs/install.md gives them, for one pool or more,
// in the default RADOS namespace or another.
func TestCaps(t *testing.T) {
	for got, want := range map[string]string{
		CapRBD("", "kubernetes"):                      "osd 'profile rbd pool=kubernetes'",
		CapRBD("t1", "a", "b"):                        "osd 'profile rbd pool=a namespace=t1, profile rbd pool=b namespace=t1'",
		CapMgr("kubernetes"):                          "mgr 'profile rbd pool=kubernetes'",
		CapRegistry("kubernetes", "", "rbdcsi.nodes"): "osd 'allow rwx pool=kubernetes object_prefix rbdcsi.nodes'",
		CapRegistry("p", "t1", "rbdcsi.nodes"):        "osd 'allow rwx pool=p namespace=t1 object_prefix rbdcsi.nodes'",
		OnPool("", "a", "b"):                          "pool a and pool b",
		OnPool("t1", "a"):                             "pool a, namespace t1",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

// A refusal keeps its cause for errors.Is, names the user, what on, the
// caps and the guide, and is not named twice.
func TestRefused(t *testing.T) {
	denied := errors.New("permission denied")
	cause := fmt.Errorf("opening image rbd/x: %w", denied)
	r := &Refused{User: "k8s", On: OnPool("", "rbd"), Need: CapRBD("", "rbd"), Err: cause}
	want := "Ceph refused client.k8s on pool rbd: the user needs osd 'profile rbd pool=rbd' (docs/install.md#3-the-ceph-users; `ceph auth get client.k8s` shows its caps): opening image rbd/x: permission denied"
	if r.Error() != want || !errors.Is(r, denied) {
		t.Errorf("Refused = %q (wraps the cause %v), want %q", r, errors.Is(r, denied), want)
	}
	if n := r.Needing("object o in pool rbd", CapLift); !strings.Contains(n.Error(), "on object o in pool rbd: the user needs "+CapLift) || !errors.Is(n, denied) {
		t.Errorf("Needing = %q", n)
	}
	a := &AuthRefused{User: "k8s", MonHost: "v2:192.0.2.1:3300", Err: cause}
	if !strings.HasPrefix(a.Error(), "the Ceph monitors v2:192.0.2.1:3300 refused client.k8s: ") || !errors.Is(a, denied) {
		t.Errorf("AuthRefused = %q", a)
	}
	for _, err := range []error{r, a, fmt.Errorf("volume v: %w", r)} {
		if !Named(err) {
			t.Errorf("Named(%v) = false", err)
		}
	}
	if Named(cause) {
		t.Error("a bare refusal counts as named")
	}
}
