package upkeep

import (
	"context"
	"errors"
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
