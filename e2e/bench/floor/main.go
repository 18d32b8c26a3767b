// Command floor is the memory floor P5 compares the plugin with: the
// least a Go program holds once it links librbd and librados (through
// internal/rbd/ceph, as the plugin does) and has made one Ceph connection.
// The bench starts it as it starts every side; it prints "ready" once
// started, before any Ceph connection, as a plugin opens its socket. Each
// line on its standard input is a command, answered by "done": "warm"
// does what the bench's warm-up does to every side (one volume's image
// created with its metadata, read, removed); "burst" runs the Ceph work of
// P1's peak, N creates and N read-and-removes at concurrency C. It holds
// still between commands while the bench reads its memory as it reads the
// plugin's, and exits when its standard input closes. What the plugin
// holds above this is the plugin's own: gRPC, the services, their caches.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
)

func main() {
	prefix := flag.String("image", "", "prefix of the images to create and remove (required)")
	n := flag.Int("burst-n", 200, "images per burst")
	c := flag.Int("burst-c", 16, "concurrency of a burst")
	flag.Parse()
	pool := rbd.Pool{
		MonHost: os.Getenv("CEPH_MON_HOST"), Name: os.Getenv("CEPH_POOL"),
		Cred: cluster.Credentials{ID: os.Getenv("CEPH_CSI_USER"), Key: os.Getenv("CEPH_CSI_KEY")},
	}
	if *prefix == "" || pool.MonHost == "" || pool.Cred.Key == "" {
		fmt.Fprintln(os.Stderr, "floor: -image and a cluster in the environment (CEPH_MON_HOST, CEPH_POOL, CEPH_CSI_USER, CEPH_CSI_KEY) are required")
		os.Exit(2)
	}
	if err := run(pool, *prefix, *n, *c); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(pool rbd.Pool, prefix string, n, c int) error {
	conns := ceph.NewConns(ceph.DefaultOptions())
	defer conns.Close()
	backend := ceph.NewBackend(conns, ceph.BackendOptions{})
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var err error
		switch in.Text() {
		case "warm":
			err = burst(backend, pool, prefix, 1, 1)
		case "burst":
			err = burst(backend, pool, prefix, n, c)
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			return err
		}
		fmt.Println("done")
	}
	return in.Err()
}

// burst does the Ceph work of n CreateVolume calls and then of n
// DeleteVolume calls (read the image, remove it) on c goroutines, as a
// P1 round does; the images are <prefix>-0 to <prefix>-(n-1).
func burst(backend *ceph.Backend, pool rbd.Pool, prefix string, n, c int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := func(i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
	err := parallel(n, c, func(i int) error {
		return backend.CreateImage(ctx, pool, name(i), rbd.ImageSpec{
			Size: 1 << 30, Features: config.SingleWriterFeatures(), Metadata: map[string]string{"rbdcsi.name": name(i)},
		})
	})
	if err != nil {
		return err
	}
	return parallel(n, c, func(i int) error {
		if _, err := backend.StatFamily(ctx, pool, name(i), ""); err != nil {
			return err
		}
		return backend.RemoveImage(ctx, pool, name(i))
	})
}

// parallel runs f(0..n-1) on c goroutines and returns the first error.
// The bench's runOps does the same, but importing the bench or its
// harness would put their code in the floor, whose memory is the measure.
func parallel(n, c int, f func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, c)
	for range c {
		go func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range c {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
