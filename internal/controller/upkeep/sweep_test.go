package upkeep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/lock"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/fake"
)

// sweeps records the sweeps the observer hears of.
type sweeps struct {
	NopObserver
	done chan error
}

func (s sweeps) Swept(err error) { s.done <- err }

// A registered step runs in every sweep after the steps before it, a
// failed one does not keep the next from running, and the sweep reports
// its failure.
func TestRegisteredSteps(t *testing.T) {
	obs := sweeps{done: make(chan error, 1)}
	k := New(Options{
		Backend: fake.New(fake.Options{Pools: []string{"rbd"}}), Locks: lock.New(), Names: records.NewNames("", nil),
		Clusters: cluster.NewStaticMap(nil), SweepInterval: time.Hour, Observer: obs,
	})
	defer k.Close()
	var mu sync.Mutex
	var ran []string
	step := func(name string, err error) Step {
		return Step{What: name, Sweep: func(context.Context, rbd.Pool) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name)
			return err
		}}
	}
	broken := errors.New("broken")
	k.Register(step("first", broken), step("second", nil))
	k.After(rbd.Pool{Name: "rbd"})
	select {
	case err := <-obs.done:
		if !errors.Is(err, broken) {
			t.Errorf("the sweep reported %v, want the first step's failure", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no sweep within 5 s")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || ran[0] != "first" || ran[1] != "second" {
		t.Errorf("steps ran as %v", ran)
	}
}

// Which copies of a mirrored image are the peer's.
func TestNonPrimary(t *testing.T) {
	for _, tc := range []struct {
		info rbd.MirrorInfo
		want bool
	}{
		{rbd.MirrorInfo{State: rbd.MirrorDisabled}, false},
		{rbd.MirrorInfo{}, false},
		{rbd.MirrorInfo{State: rbd.MirrorEnabled, Primary: true}, false},
		{rbd.MirrorInfo{State: rbd.MirrorEnabled}, true},
		{rbd.MirrorInfo{State: rbd.MirrorEnabled, DemotedHere: true}, true},
		{rbd.MirrorInfo{State: rbd.MirrorDisabling}, true},
		{rbd.MirrorInfo{State: rbd.MirrorDisabling, Primary: true}, false},
	} {
		if got := nonPrimary(tc.info); got != tc.want {
			t.Errorf("nonPrimary(%+v) = %v, want %v", tc.info, got, tc.want)
		}
	}
}

// watched records what the sweep asks of the backend: which images it
// removes (or tries to) and how often it reads mirror info. With
// noMirrorInFamily, StatFamily reports no mirror info, as the real
// backend does for a copy that has no mirror snapshot yet.
type watched struct {
	*fake.Ceph
	noMirrorInFamily bool

	mu          sync.Mutex
	removed     []string
	mirrorReads map[string]int
}

func (w *watched) StatFamily(ctx context.Context, p rbd.Pool, name, id string) (rbd.Family, error) {
	fam, err := w.Ceph.StatFamily(ctx, p, name, id)
	if w.noMirrorInFamily {
		fam.Mirror = nil
	}
	return fam, err
}

func (w *watched) MirrorInfo(ctx context.Context, p rbd.Pool, name string) (rbd.MirrorInfo, error) {
	w.mu.Lock()
	w.mirrorReads[name]++
	w.mu.Unlock()
	return w.Ceph.MirrorInfo(ctx, p, name)
}

func (w *watched) RemoveSnapshot(ctx context.Context, p rbd.Pool, imageID, snap string) error {
	w.mu.Lock()
	w.removed = append(w.removed, snap)
	w.mu.Unlock()
	return w.Ceph.RemoveSnapshot(ctx, p, imageID, snap)
}

func (w *watched) RemoveImage(ctx context.Context, p rbd.Pool, name string) error {
	w.mu.Lock()
	w.removed = append(w.removed, name)
	w.mu.Unlock()
	return w.Ceph.RemoveImage(ctx, p, name)
}

// The sweep leaves a non-primary mirror copy alone, whatever it looks
// like (unfinished, a hidden image nothing needs, a volume with a clone's
// temporary snapshot): it is the peer's. It still removes an unfinished
// image that is mirrored as the primary, or not mirrored, and the
// temporary snapshot of a volume that is not mirrored; it reads mirror
// info only for the images it would change, not for every image it
// looks at.
func TestSweepLeavesNonPrimaryCopies(t *testing.T) {
	for _, noMirrorInFamily := range []bool{false, true} {
		t.Run(fmt.Sprintf("mirror info in the family %v", !noMirrorInFamily), func(t *testing.T) {
			// Every image was made an hour ago: settled, for a sweep
			// interval of a minute.
			ceph := fake.New(fake.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
			ceph.SetPoolMirrorMode("rbd", "image")
			ceph.PeerPool("rbd")
			w := &watched{Ceph: ceph, noMirrorInFamily: noMirrorInFamily, mirrorReads: map[string]int{}}
			names := records.NewNames("", nil)
			pool := rbd.Pool{Name: "rbd"}
			bg := context.Background()
			mk := func(request string, meta map[string]string) string {
				image := names.Image(records.VolumePrefix, request)
				if err := ceph.CreateImage(bg, pool, image, rbd.ImageSpec{Size: 1 << 20, Metadata: meta}); err != nil {
					t.Fatal(err)
				}
				return image
			}
			mirror := func(image string, primary bool) {
				if err := ceph.EnableMirroring(bg, pool, image); err != nil {
					t.Fatal(err)
				}
				if !primary {
					if err := ceph.MakeNonPrimary(pool, image, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			copyUnfinished := mk("copy-unfinished", nil)
			mirror(copyUnfinished, false)
			primaryUnfinished := mk("primary-unfinished", nil)
			mirror(primaryUnfinished, true)
			plainUnfinished := mk("plain-unfinished", nil)
			finished := mk("finished", map[string]string{records.MetaName: "finished"})
			// A deleted volume's copy that nothing needs, as the
			// primary's rename to its hidden name arrives.
			hiddenSrc := mk("hidden", map[string]string{records.MetaName: "hidden"})
			info, err := ceph.Stat(bg, pool, hiddenSrc)
			if err != nil {
				t.Fatal(err)
			}
			copyHidden := records.HiddenPrefix + info.ID
			if err := ceph.Rename(bg, pool, hiddenSrc, copyHidden); err != nil {
				t.Fatal(err)
			}
			mirror(copyHidden, false)
			// Volumes that a clone's CreateVolume left a temporary
			// snapshot on, one of them a copy.
			tmp := names.TmpSnap("clone")
			withTmp := func(request string) string {
				image := mk(request, map[string]string{records.MetaName: request})
				if err := ceph.CreateSnapshot(bg, pool, image, tmp); err != nil {
					t.Fatal(err)
				}
				return image
			}
			copyWithTmp := withTmp("copy-with-tmp")
			mirror(copyWithTmp, false)
			plainWithTmp := withTmp("plain-with-tmp")

			obs := sweeps{done: make(chan error, 1)}
			k := New(Options{Backend: w, Locks: lock.New(), Names: names, Clusters: cluster.NewStaticMap(nil),
				SweepInterval: time.Minute, Observer: obs})
			defer k.Close()
			k.After(pool)
			select {
			case err := <-obs.done:
				if err != nil {
					t.Fatalf("the sweep failed: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no sweep within 5 s")
			}
			imgs, err := ceph.ListImages(bg, pool)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(imgs)
			want := []string{copyHidden, copyUnfinished, finished, copyWithTmp, plainWithTmp}
			slices.Sort(want)
			if !slices.Equal(imgs, want) {
				t.Errorf("after the sweep the pool holds %v, want %v", imgs, want)
			}
			for image, want := range map[string]int{copyWithTmp: 1, plainWithTmp: 0} {
				fam, err := ceph.StatFamily(bg, pool, image, "")
				if err != nil || len(fam.Snaps) != want {
					t.Errorf("%s has snapshots %v (%v), want %d", image, fam.Snaps, err, want)
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if want := []string{primaryUnfinished, plainUnfinished, tmp}; !sameSet(w.removed, want) {
				t.Errorf("the sweep removed %v, want %v (never a non-primary copy or its snapshot)", w.removed, want)
			}
			// Read once for each image the sweep would change whose
			// family does not tell: never for the finished one.
			wantReads := map[string]int{plainUnfinished: 1, plainWithTmp: 1}
			if noMirrorInFamily {
				wantReads = map[string]int{copyUnfinished: 1, primaryUnfinished: 1, plainUnfinished: 1, copyHidden: 1,
					copyWithTmp: 1, plainWithTmp: 1}
			}
			if !maps.Equal(w.mirrorReads, wantReads) {
				t.Errorf("mirror info read %v, want %v", w.mirrorReads, wantReads)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A sweep reads each finished volume once, marks it clean and leaves it
// unread while nothing touches it; the mark of an image removed by other
// means goes with the next sweep, so the marks stay as many as the images.
func TestSweepForgetsImagesGone(t *testing.T) {
	backend := fake.New(fake.Options{Pools: []string{"rbd"}})
	names := records.NewNames("", nil)
	s := newSweeper(newEnv(Options{Backend: backend, Locks: lock.New(), Names: names, Clusters: cluster.NewStaticMap(nil)}), time.Hour)
	defer s.stop()
	pool := rbd.Pool{Name: "rbd"}
	var images []string
	for i := range 3 {
		req := fmt.Sprintf("vol-%d", i)
		img := names.Image(records.VolumePrefix, req)
		if err := backend.CreateImage(context.Background(), pool, img, rbd.ImageSpec{Size: 1 << 20, Metadata: map[string]string{records.MetaName: req}}); err != nil {
			t.Fatal(err)
		}
		images = append(images, img)
	}
	marks := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Sorted(maps.Keys(s.clean))
	}
	if err := s.sweep(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if got := marks(); len(got) != 3 {
		t.Fatalf("after the first sweep: marks %v, want the 3 images", got)
	}
	if err := backend.RemoveImage(context.Background(), pool, images[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.sweep(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	want := []string{records.PoolImageKey(pool, images[0]), records.PoolImageKey(pool, images[2])}
	slices.Sort(want)
	if got := marks(); !slices.Equal(got, want) {
		t.Fatalf("after the image went: marks %v, want %v", got, want)
	}
}
