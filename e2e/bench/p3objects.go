package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// imageLayout is where an image's data lives: the RADOS object name
// prefix and the size of each object.
type imageLayout struct {
	prefix     string
	objectSize int64
}

func (b *bench) imageLayout(ctx context.Context, image string) (imageLayout, error) {
	out, err := b.c.admin(ctx, "rbd", "info", "--format", "json", b.c.Pool+"/"+image)
	if err != nil {
		return imageLayout{}, err
	}
	var info struct {
		Prefix     string `json:"block_name_prefix"`
		ObjectSize int64  `json:"object_size"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Prefix == "" || info.ObjectSize <= 0 {
		return imageLayout{}, fmt.Errorf("rbd info %s: no block_name_prefix or object_size in %q", image, out)
	}
	return imageLayout{prefix: info.Prefix, objectSize: info.ObjectSize}, nil
}

// dataObjects lists the indices of the image's data objects: the parts of
// the image something wrote.
func (b *bench) dataObjects(ctx context.Context, l imageLayout) ([]int64, error) {
	out, err := b.c.admin(ctx, "rados", "-p", b.c.Pool, "ls")
	if err != nil {
		return nil, err
	}
	var objs []int64
	for _, o := range strings.Fields(out) {
		if hex, ok := strings.CutPrefix(o, l.prefix+"."); ok {
			n, err := strconv.ParseInt(hex, 16, 64)
			if err != nil {
				return nil, fmt.Errorf("RBD data object %s: %w", o, err)
			}
			objs = append(objs, n)
		}
	}
	slices.Sort(objs)
	return objs, nil
}

// stagedExt4Needs reads what the ext4 staged at staging needs written,
// from the device mounted there.
func stagedExt4Needs(ctx context.Context, staging string, objSize int64) (ext4Objects, error) {
	mounts, err := harness.MountsUnder(staging)
	if err != nil {
		return ext4Objects{}, err
	}
	for _, m := range mounts {
		if m.Point == staging && strings.HasPrefix(m.Source, "/dev/") {
			return ext4Needs(ctx, m.Source, objSize)
		}
	}
	return ext4Objects{}, fmt.Errorf("no block device mounted at %s", staging)
}

// objectsCheck compares the objects an image holds with those its
// filesystem needs.
type objectsCheck struct {
	Held   int `json:"held"`
	Needed int `json:"needed"`
	// Beyond are the objects held but not needed, described; Missing
	// counts the needed ones not held (a fresh image reads them as
	// zeros, which is what they would hold then).
	Beyond  []string `json:"beyond,omitempty"`
	Missing int      `json:"missing"`
	beyond  []int64
	// Why lists what each needed object holds, by index.
	Why map[int64]string `json:"needed_for"`
}

func checkObjects(held []int64, fsObjs ext4Objects, size, objSize int64) *objectsCheck {
	c := &objectsCheck{Held: len(held), Needed: len(fsObjs.Need), Why: fsObjs.Need}
	last := (size - 1) / objSize
	for _, o := range held {
		if _, ok := fsObjs.Need[o]; ok {
			continue
		}
		what, ok := fsObjs.Zeros[o]
		if !ok {
			what = "no filesystem metadata"
		}
		where := fmt.Sprintf("object %d at %s: %s", o, byteSize(o*objSize), what)
		if o == last {
			where += ", the device's last object"
		}
		c.Beyond, c.beyond = append(c.Beyond, where), append(c.beyond, o)
	}
	for o := range fsObjs.Need {
		if !slices.Contains(held, o) {
			c.Missing++
		}
	}
	return c
}

// sayContents adds to the first objects beyond the needed ones whether
// they hold anything but zeros: a zero-filled object is one written for
// nothing on a fresh image.
func (b *bench) sayContents(ctx context.Context, l imageLayout, c *objectsCheck) error {
	for i, o := range c.beyond[:min(len(c.beyond), 5)] {
		data, err := b.c.admin(ctx, "rados", "-p", b.c.Pool, "get", fmt.Sprintf("%s.%016x", l.prefix, o), "-")
		if err != nil {
			return err
		}
		if strings.Trim(data, "\x00") == "" {
			c.Beyond[i] += "; holds only zeros"
		} else {
			c.Beyond[i] += "; holds data"
		}
	}
	return nil
}

func byteSize(n int64) string {
	switch {
	case n >= gib:
		return fmt.Sprintf("%.2f GiB", float64(n)/float64(gib))
	case n >= mib:
		return fmt.Sprintf("%.0f MiB", float64(n)/float64(mib))
	}
	return fmt.Sprintf("%d B", n)
}

// ext4ObjectRows adds, per size, the row that holds ext4's objects to the
// set its metadata needs: the round with the most objects beyond it
// speaks for the size.
func (b *bench) ext4ObjectRows(runs []stageRun) {
	for _, size := range []int64{gib, tib} {
		var worst *objectsCheck
		for _, r := range runs {
			if r.FS == "ext4" && r.Size == size && r.Ext4 != nil && (worst == nil || len(r.Ext4.Beyond) > len(worst.Beyond)) {
				worst = r.Ext4
			}
		}
		if worst == nil {
			continue
		}
		beyond := "none"
		if len(worst.Beyond) > 0 {
			beyond = strings.Join(worst.Beyond[:min(5, len(worst.Beyond))], "; ")
			if len(worst.Beyond) > 5 {
				beyond += fmt.Sprintf("; and %d more", len(worst.Beyond)-5)
			}
		}
		rw := vs(fmt.Sprintf("ext4 %s: RBD objects after stage + unstage vs those the made filesystem needs (worst of %d rounds; beyond them: %s; needed but not written: %d)",
			sizeName(size), b.cfg.stageRounds, beyond, worst.Missing), "objects", float64(worst.Held), float64(worst.Needed), "needed")
		b.rep.Rows = append(b.rep.Rows, judgeRow(keyP3Ext4Objects, rw, len(worst.Beyond)))
	}
}
