package main

// P8, a full pool: the controller's costs in a pool of many volumes
// against the same in an empty one. The pool is the bench's own (made and
// removed here), filled with thin images made with raw librbd and named
// and labelled as the driver's volumes, so that the plugin lists, sweeps
// and deletes them as its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/rbd/ceph"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// P8's pools: the one it fills and one of the same make it leaves empty,
// so that the rates in each can be taken round after round.
const (
	fullPoolName  = "bench-full"
	emptyPoolName = "bench-empty"
)

// p8Pools makes P8's pools and lets the CSI user into them; the returned
// function removes the pools and gives the user its caps back.
func (b *bench) p8Pools(ctx context.Context) (full, empty rbd.Pool, _ func(), _ error) {
	full, empty = b.pool, b.pool
	full.Name, empty.Name = fullPoolName, emptyPoolName
	caps, err := b.c.admin(ctx, "ceph", "auth", "get", "client."+b.c.CSIUser, "--format", "json")
	if err != nil {
		return full, empty, nil, err
	}
	var ents []struct {
		Caps map[string]string `json:"caps"`
	}
	if err := json.Unmarshal([]byte(caps), &ents); err != nil || len(ents) != 1 {
		return full, empty, nil, fmt.Errorf("reading the caps of client.%s: %v: %q", b.c.CSIUser, err, caps)
	}
	orig := ents[0].Caps
	capArgs := func(c map[string]string) []string {
		args := []string{"auth", "caps", "client." + b.c.CSIUser}
		for _, k := range []string{"mon", "osd", "mgr"} {
			if c[k] != "" {
				args = append(args, k, c[k])
			}
		}
		return args
	}
	steps := [][]string{
		{"ceph", "config", "set", "mon", "mon_allow_pool_delete", "true"},
		{"ceph", "osd", "pool", "create", full.Name, "16"},
		{"rbd", "pool", "init", full.Name},
		{"ceph", "osd", "pool", "create", empty.Name, "16"},
		{"rbd", "pool", "init", empty.Name},
	}
	wider := map[string]string{"mon": orig["mon"], "osd": orig["osd"] + ", profile rbd pool=" + full.Name + ", profile rbd pool=" + empty.Name, "mgr": orig["mgr"]}
	steps = append(steps, append([]string{"ceph"}, capArgs(wider)...))
	remove := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := b.c.admin(cctx, "ceph", append([]string{}, capArgs(orig)...)...); err != nil {
			b.logf("P8: giving client.%s its caps back: %v", b.c.CSIUser, err)
		}
		for _, p := range []rbd.Pool{full, empty} {
			if _, err := b.c.admin(cctx, "ceph", "osd", "pool", "rm", p.Name, p.Name, "--yes-i-really-really-mean-it"); err != nil {
				b.logf("P8: removing pool %s: %v", p.Name, err)
				b.extraLeft = append(b.extraLeft, "pool "+p.Name+": "+err.Error())
			}
		}
	}
	for _, s := range steps {
		// runs: ceph rbd
		if _, err := b.c.admin(ctx, s[0], s[1:]...); err != nil {
			remove()
			return full, empty, nil, err
		}
	}
	return full, empty, remove, nil
}

// secretDir writes the CSI user's key as a mounted Secret would hold it,
// for --controller-secret-dir.
func (b *bench) secretDir() (string, error) {
	dir := filepath.Join(b.work, "controller-secret")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	for k, v := range map[string]string{"userID": b.c.CSIUser, "userKey": b.c.CSIKey} {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// fillPool makes images [from, to) in the pool, thin and named and labelled
// as finished volumes of the driver, every tenth with a snapshot, through
// raw, a backend whose connections were made after the CSI user got its
// caps on the pool (a connection keeps the caps it was given).
func (b *bench) fillPool(ctx context.Context, raw *ceph.Backend, p rbd.Pool, from, to int) (time.Duration, error) {
	names := records.NewNames("", nil)
	return runOps(ctx, to-from, b.cfg.fillConcurrency, func(ctx context.Context, i int) error {
		req := fmt.Sprintf("bench-%s-fill-%d", b.runID, from+i)
		ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
		defer cancel()
		img := names.Image(records.VolumePrefix, req)
		if err := raw.CreateImage(ctx, p, img, rbd.ImageSpec{
			Size: uint64(gib), Features: b.c.features(), Metadata: map[string]string{records.MetaName: req},
		}); err != nil {
			return err
		}
		if (from+i)%snapEvery != 0 {
			return nil
		}
		return raw.CreateSnapshot(ctx, p, img, names.Snap(req))
	})
}

// snapEvery: every tenth image of the fill has a snapshot, as CreateSnapshot
// names them, for ListSnapshots to page through.
const snapEvery = 10

// snapsIn is how many of the first n images of the fill have a snapshot.
func snapsIn(n int) int { return (n + snapEvery - 1) / snapEvery }

// rateRound creates then deletes -full-volumes volumes in the pool
// through the plugin and returns the creates and deletes per second.
func (b *bench) rateRound(ctx context.Context, pl *plugin, p rbd.Pool, tag string) (create, del float64, err error) {
	cc := pl.controller()
	ids := make([]string, b.cfg.fullVolumes)
	took, err := runOps(ctx, len(ids), b.cfg.fullConcurrency, func(ctx context.Context, i int) error {
		v, err := b.createIn(ctx, cc, p, fmt.Sprintf("bench-%s-p8-%s-%d", b.runID, tag, i))
		if err == nil {
			ids[i] = v.VolumeId
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	create = float64(len(ids)) / took.Seconds()
	took, err = runOps(ctx, len(ids), b.cfg.fullConcurrency, func(ctx context.Context, i int) error {
		return b.deleteVolume(ctx, cc, ids[i])
	})
	return create, float64(len(ids)) / took.Seconds(), err
}

// rates takes -full-rounds rounds of creates and deletes in the full pool
// and in the empty one, one after the other, and returns the median
// rates and the medians of the rounds' ratios (full over empty), so that
// the drift of a shared machine's load cancels out as in P1.
func (b *bench) rates(ctx context.Context, pl *plugin, full, empty rbd.Pool, tag string) (r p8Rates, err error) {
	before, err := scrapeOps(ctx, pl.metricsAddr)
	if err != nil {
		return r, err
	}
	var cf, df, ce, de, cr, dr []float64
	for i := 0; i < b.cfg.fullRounds; i++ {
		c0, d0, err := b.rateRound(ctx, pl, empty, fmt.Sprintf("%s-empty-%d", tag, i))
		if err != nil {
			return r, err
		}
		c1, d1, err := b.rateRound(ctx, pl, full, fmt.Sprintf("%s-full-%d", tag, i))
		if err != nil {
			return r, err
		}
		ce, de, cf, df = append(ce, c0), append(de, d0), append(cf, c1), append(df, d1)
		cr, dr = append(cr, c1/c0), append(dr, d1/d0)
	}
	if after, err := scrapeOps(ctx, pl.metricsAddr); err == nil {
		b.rep.Details["p8_ops_per_create_and_delete_"+tag] = after.since(before, 2*b.cfg.fullRounds*b.cfg.fullVolumes)
	}
	return p8Rates{CreateFull: median(cf), DeleteFull: median(df), CreateEmpty: median(ce), DeleteEmpty: median(de),
		CreateRatio: median(cr), DeleteRatio: median(dr)}, nil
}

// p8Rates are the rates in the full and the empty pool, and the medians
// of the rounds' ratios.
type p8Rates struct {
	CreateFull, DeleteFull, CreateEmpty, DeleteEmpty float64
	CreateRatio, DeleteRatio                         float64
}

// createIn is createVolume in another pool than the cluster's own.
func (b *bench) createIn(ctx context.Context, cc csi.ControllerClient, p rbd.Pool, name string) (*csi.Volume, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.callTimeout)
	defer cancel()
	params := b.c.params()
	params["pool"] = p.Name
	resp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")}, Parameters: params, Secrets: b.c.secrets(),
	})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	b.led.addVolume(resp.Volume.VolumeId, cc)
	return resp.Volume, nil
}

// listing is one complete paginated listing.
type listing struct {
	Entries int              `json:"entries"`
	Pages   int              `json:"pages"`
	Seconds float64          `json:"seconds"`
	Ops     map[string]opUse `json:"plugin_ceph_ops_per_entry"`
	OSDOps  float64          `json:"osd_ops_per_entry"`
	ByPool  map[string]int   `json:"entries_by_pool,omitempty"`
}

// perK is the listing's time per 1,000 entries.
func (l listing) perK() float64 { return l.Seconds * 1000 / float64(max(l.Entries, 1)) }

// listAll pages through ListVolumes or ListSnapshots and counts the
// entries in pool.
func (b *bench) listAll(ctx context.Context, pl *plugin, snaps bool, pool string) (listing, error) {
	cc := pl.controller()
	before, err := scrapeOps(ctx, pl.metricsAddr)
	if err != nil {
		return listing{}, err
	}
	osdBefore, err := b.osdOps(ctx)
	if err != nil {
		return listing{}, err
	}
	l := listing{ByPool: map[string]int{}}
	token := ""
	start := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.nodeTimeout)
		var next string
		var ids []string
		if snaps {
			resp, err := cc.ListSnapshots(cctx, &csi.ListSnapshotsRequest{MaxEntries: int32(b.cfg.listPage), StartingToken: token, Secrets: b.c.secrets()})
			if err != nil {
				cancel()
				return l, fmt.Errorf("ListSnapshots page %d: %w", l.Pages+1, err)
			}
			for _, e := range resp.Entries {
				ids = append(ids, e.Snapshot.SnapshotId)
			}
			next = resp.NextToken
		} else {
			resp, err := cc.ListVolumes(cctx, &csi.ListVolumesRequest{MaxEntries: int32(b.cfg.listPage), StartingToken: token})
			if err != nil {
				cancel()
				return l, fmt.Errorf("ListVolumes page %d: %w", l.Pages+1, err)
			}
			for _, e := range resp.Entries {
				ids = append(ids, e.Volume.VolumeId)
			}
			next = resp.NextToken
		}
		cancel()
		l.Pages++
		for _, id := range ids {
			l.Entries++
			if v, err := volid.DecodeVolume(id); err == nil {
				l.ByPool[v.Pool]++
			} else if s, err := volid.DecodeSnapshot(id); err == nil {
				l.ByPool[s.Pool]++
			}
		}
		if token = next; token == "" {
			break
		}
	}
	l.Seconds = time.Since(start).Seconds()
	after, err := scrapeOps(ctx, pl.metricsAddr)
	if err != nil {
		return l, err
	}
	osdAfter, err := b.osdOps(ctx)
	if err != nil {
		return l, err
	}
	n := max(l.Entries, 1)
	l.Ops = after.since(before, n)
	l.OSDOps = round2(float64(osdAfter-osdBefore) / float64(n))
	return l, nil
}

// osdOps sums the client operations every OSD has served so far (perf
// counter osd.op: reads, writes and read-modify-writes).
func (b *bench) osdOps(ctx context.Context) (int64, error) {
	out, err := b.c.admin(ctx, "ceph", "osd", "ls")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, id := range strings.Fields(out) {
		js, err := b.c.admin(ctx, "ceph", "tell", "osd."+id, "perf", "dump", "osd")
		if err != nil {
			return 0, err
		}
		var d struct {
			OSD struct {
				Op int64 `json:"op"`
			} `json:"osd"`
		}
		if err := json.Unmarshal([]byte(js), &d); err != nil {
			return 0, fmt.Errorf("perf dump of osd.%s: %w", id, err)
		}
		total += d.OSD.Op
	}
	return total, nil
}
