package cluster

import (
	"errors"
	"fmt"
	"os"
	"slices"
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
	if n := r.Needing("object o in pool rbd", CapNodeMon); !strings.Contains(n.Error(), "on object o in pool rbd: the user needs "+CapNodeMon) || !errors.Is(n, denied) {
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

// The node user's OSD cap: every stage grant in the tenant's namespace,
// rbd_info in the pool's default one (librbd reads the pool's metadata
// there at every open), the data pool's data objects, the registry.
func TestNodeOSD(t *testing.T) {
	got := NodeOSD("t1", "p", "rbdcsi.nodes", []string{"p"}, []string{"ec"})
	for _, want := range []string{
		"allow rwx pool=p namespace=t1 object_prefix rbd_data.,",
		"allow rwx pool=p namespace=t1 object_prefix rbd_header.,",
		"allow r class-read pool=p object_prefix rbd_info,",
		"allow rwx pool=ec namespace=t1 object_prefix rbd_data.,",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("NodeOSD lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, ", allow rwx pool=p namespace=t1 object_prefix rbdcsi.nodes") {
		t.Errorf("NodeOSD does not end with the registry's grant:\n%s", got)
	}
	if strings.Contains(got, "profile") || strings.Count(got, "class-read") != 5 {
		t.Errorf("NodeOSD grants more than staging needs:\n%s", got)
	}
	if c := CapNode("", "p", "rbdcsi.nodes", []string{"p"}, nil); !strings.HasPrefix(c, "osd 'allow rwx pool=p object_prefix rbd_data., ") || !strings.HasSuffix(c, "'") {
		t.Errorf("CapNode = %s", c)
	}
}

// The install guide's node user is NodeOSD's: the e2e makes its user by
// running the guide, the other tests with NodeOSD.
func TestInstallGuideNodeCaps(t *testing.T) {
	doc, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	var guide []string
	for _, line := range strings.Split(string(doc), "\n") {
		if v, ok := strings.CutPrefix(line, `node_osd+="`); ok {
			guide = append(guide, strings.TrimSuffix(v, `"`))
		} else if v, ok := strings.CutPrefix(line, `node_osd="`); ok {
			guide = append(guide, strings.TrimSuffix(v, `"`))
		}
	}
	if len(guide) == 0 {
		t.Fatal("docs/install.md builds no node_osd")
	}
	joined := strings.ReplaceAll(strings.Join(guide, ""), "$g", "pool=P")
	split := func(s string) []string {
		g := strings.Split(s, ", ")
		slices.Sort(g)
		return g
	}
	if got, want := split(joined), split(NodeOSD("", "P", "rbdcsi.nodes", []string{"P"}, nil)); !slices.Equal(got, want) {
		t.Errorf("the install guide's node caps:\n%s\nwant NodeOSD's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(doc), "mon '"+NodeMon+"'") {
		t.Errorf("the install guide does not give the node user %s", CapNodeMon)
	}
}
