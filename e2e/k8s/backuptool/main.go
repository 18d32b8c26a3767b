// Command backuptool does what a backup tool built on Kubernetes'
// changed-block tracking does, reduced to what the e2e checks: it asks,
// through the external-snapshot-metadata project's own client library
// (pkg/iterator, on which upstream's lister and backup tools are built),
// which ranges a VolumeSnapshot holds or which changed since an earlier
// one, and copies them from a device restored from the snapshot to the
// device a backup is restored to. It runs in a pod, as its service
// account, which the driver's snapshot-metadata-client role is bound to.
//
//	backuptool list -namespace NS -snapshot S [-base B] [-max-results N]
//	backuptool copy -namespace NS -snapshot S [-base B] -from DEV -to DEV
//	backuptool sum DEV SIZE
//
// list and copy print one JSON object: the ranges, the volume's capacity
// and how many messages the stream had (and copy the bytes copied); sum
// prints the sha256 of the first SIZE bytes of DEV. It lives in a module of
// its own so that the driver's module does not take in client-go.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"k8s.io/client-go/rest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "backuptool:", err)
		os.Exit(1)
	}
}

// result is what list and copy print.
type result struct {
	Ranges   [][2]int64 `json:"ranges"`
	Capacity int64      `json:"capacity"`
	Records  int        `json:"records"`
	Copied   int64      `json:"copied,omitempty"`
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: backuptool list|copy|sum ...")
	}
	if args[0] == "sum" {
		if len(args) != 3 {
			return errors.New("usage: backuptool sum DEV SIZE")
		}
		size, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return err
		}
		return sum(args[1], size)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	ns := fs.String("namespace", "", "the VolumeSnapshots' namespace")
	snap := fs.String("snapshot", "", "the VolumeSnapshot")
	base := fs.String("base", "", "an earlier VolumeSnapshot of the same claim: list what changed since")
	maxResults := fs.Int("max-results", 0, "ranges per message (0: the driver's choice)")
	from := fs.String("from", "", "copy: the device restored from -snapshot")
	to := fs.String("to", "", "copy: the device the backup is restored to")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	res, err := list(*ns, *snap, *base, int32(*maxResults))
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
	case "copy":
		if *from == "" || *to == "" {
			return errors.New("copy needs -from and -to")
		}
		if res.Copied, err = copyRanges(*from, *to, res.Ranges); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// list runs the iterator as the pod's service account.
func list(ns, snap, base string, maxResults int32) (result, error) {
	config, err := rest.InClusterConfig()
	if err != nil {
		return result{}, err
	}
	clients, err := iterator.BuildClients(config)
	if err != nil {
		return result{}, err
	}
	var res result
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = iterator.GetSnapshotMetadata(ctx, iterator.Args{
		Clients: clients, Emitter: &collector{res: &res},
		Namespace: ns, SnapshotName: snap, PrevSnapshotName: base, MaxResults: maxResults,
	})
	return res, err
}

// collector keeps the ranges of every record, checking that they come in
// order and every record carries the same capacity.
type collector struct{ res *result }

func (c *collector) SnapshotMetadataIteratorRecord(n int, m iterator.IteratorMetadata) error {
	if c.res.Records > 0 && m.VolumeCapacityBytes != c.res.Capacity {
		return fmt.Errorf("record %d: capacity %d, the records before said %d", n, m.VolumeCapacityBytes, c.res.Capacity)
	}
	c.res.Records, c.res.Capacity = n, m.VolumeCapacityBytes
	for _, b := range m.BlockMetadata {
		if k := len(c.res.Ranges); k > 0 && b.ByteOffset < c.res.Ranges[k-1][0]+c.res.Ranges[k-1][1] {
			return fmt.Errorf("record %d: range %d+%d starts before the one before it ends", n, b.ByteOffset, b.SizeBytes)
		}
		c.res.Ranges = append(c.res.Ranges, [2]int64{b.ByteOffset, b.SizeBytes})
	}
	return nil
}

func (c *collector) SnapshotMetadataIteratorDone(int) error { return nil }

// copyRanges copies each range from one device to the other and syncs.
func copyRanges(from, to string, ranges [][2]int64) (int64, error) {
	src, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	var copied int64
	for _, r := range ranges {
		n, err := io.Copy(io.NewOffsetWriter(dst, r[0]), io.NewSectionReader(src, r[0], r[1]))
		copied += n
		if err != nil {
			return copied, fmt.Errorf("copying %d+%d: %w", r[0], r[1], err)
		}
		if n != r[1] {
			return copied, fmt.Errorf("copying %d+%d: the source ends after %d bytes", r[0], r[1], n)
		}
	}
	return copied, dst.Sync()
}

func sum(dev string, size int64) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s holds %d bytes, fewer than %d", dev, n, size)
	}
	fmt.Println(hex.EncodeToString(h.Sum(nil)))
	return nil
}
