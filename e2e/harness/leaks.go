package harness

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// PoolLeaks lists what a suite left in the pool: images, trash entries,
// snapshot claims and image objects. Data objects of removed snapshots are
// trimmed by the OSD in the background, so they get a bounded while to go.
// The node registry (rbdcsi.nodes) is state of running nodes, not a leak,
// and the claim and static-snapshot indexes may stay empty; entries left
// in any of them are leaks. A suite run as an instance beside another
// looks only at its images and indexes: trash entries and RADOS objects
// do not say whose they are, so scripts/instances.sh checks the whole pool
// once both suites are done.
func (c Cluster) PoolLeaks() []string { return c.leaksBeyond(nil) }

// leaksBeyond is PoolLeaks less what was there already (before).
func (c Cluster) leaksBeyond(before []string) []string {
	var left []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left = slices.DeleteFunc(c.leaksNow(), func(l string) bool { return slices.Contains(before, l) })
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// leaksNow is one look at the pool.
func (c Cluster) leaksNow() []string {
	left := append(c.imageLeaks(), c.IndexLeft()...)
	if c.Instance == "" {
		left = append(left, c.trashLeaks()...)
		left = append(left, c.objectLeaks()...)
	}
	return left
}

func (c Cluster) imageLeaks() []string {
	all, err := c.listImages()
	if err != nil {
		return []string{err.Error()}
	}
	var left []string
	for _, img := range all {
		if c.ownsImage(img) {
			left = append(left, "image "+img)
		}
	}
	return left
}

func (c Cluster) trashLeaks() []string {
	out, err := c.RBD(append([]string{"trash", "ls", "--all", "-p", c.Pool}, c.NamespaceArgs()...)...)
	if err != nil {
		return []string{"rbd trash ls: " + err.Error()}
	}
	if strings.TrimSpace(out) != "" {
		return []string{"trash: " + strings.TrimSpace(out)}
	}
	return nil
}

// objectLeaks lists the driver's and RBD's objects left in the pool but
// the index objects, of any instance: images' and groups'.
func (c Cluster) objectLeaks() []string {
	out, err := c.Rados(append(c.poolArgs(), "ls")...)
	if err != nil {
		return []string{"rados ls: " + err.Error()}
	}
	var left []string
	for _, obj := range strings.Fields(out) {
		base, _, _ := strings.Cut(strings.TrimPrefix(obj, "rbdcsi."), ".")
		index := strings.HasPrefix(obj, "rbdcsi.") && (base == "nodes" || base == "snapclaims" || base == "statictmp")
		if !index && (strings.HasPrefix(obj, "rbdcsi.") || strings.HasPrefix(obj, "rbd_header.") ||
			strings.HasPrefix(obj, "rbd_data.") || strings.HasPrefix(obj, "rbd_id.") || strings.HasPrefix(obj, "rbd_group_header.")) {
			left = append(left, "object "+obj)
		}
	}
	return left
}

// IndexLeft lists the entries of the driver's index objects that outlive
// the work they track: attachment entries in the node registry
// ("attach/<node>/<volumeID>", gone once every volume is detached), fence
// records there ("fenced/<node>/<volumeID>", gone once the fenced node
// unstaged the volume and lifted them) and
// unsettled snapshot claims (rbdcsi.snapclaims, gone once every
// CreateSnapshot settled), static images with a clone's temporary snapshot
// (rbdcsi.statictmp, gone once the clone is done). The objects themselves
// may stay, empty.
func (c Cluster) IndexLeft() []string {
	var left []string
	for base, prefixes := range map[string][]string{"rbdcsi.nodes": {"attach/", "fenced/"}, "rbdcsi.snapclaims": {""}, "rbdcsi.statictmp": {""}} {
		obj := c.Object(base)
		out, err := c.Rados(append(c.poolArgs(), "listomapkeys", obj)...)
		if err != nil {
			if !strings.Contains(err.Error(), "No such file") {
				left = append(left, "rados listomapkeys "+obj+": "+err.Error())
			}
			continue
		}
		for _, k := range strings.Fields(out) {
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
				left = append(left, obj+" entry "+k)
			}
		}
	}
	return left
}

// poolArgs select the pool and the namespace.
func (c Cluster) poolArgs() []string {
	return append([]string{"-p", c.Pool}, c.NamespaceArgs()...)
}

// CheckPoolAfter runs a package's tests, then fails the run if they left
// anything in the pool (for TestMain). What an earlier suite left in a
// shared cluster fails that suite, not this one as well: the report then
// names the suite that leaked.
func CheckPoolAfter(m *testing.M) int {
	c, err := ClusterFromEnv()
	if err != nil {
		return m.Run()
	}
	before := c.leaksNow()
	if len(before) > 0 {
		fmt.Fprintf(os.Stderr, "the pool %s held before this suite ran (not counted against it):\n  %s\n", c.Pool, strings.Join(before, "\n  "))
	}
	code := m.Run()
	if left := c.leaksBeyond(before); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the suite left in pool %s:\n  %s\n", c.Pool, strings.Join(left, "\n  "))
		return 1
	}
	return code
}

// ExpectNoImages fails the test if the pool holds any image or trash entry.
func (c Cluster) ExpectNoImages(t testing.TB) {
	t.Helper()
	if imgs := c.Images(t); len(imgs) > 0 {
		t.Errorf("leaked images in pool %s: %v", c.Pool, imgs)
	}
	if c.Instance != "" {
		return // the trash is not the suite's alone: scripts/instances.sh checks it after
	}
	out, err := c.RBD("trash", "ls", "-p", c.Pool)
	if err != nil {
		t.Fatalf("rbd trash ls: %v: %s", err, out)
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("leaked trash entries in pool %s: %s", c.Pool, out)
	}
}
