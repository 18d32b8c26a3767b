package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ext4Objects says, by object index, what the objects of a device
// (objSize bytes each) hold of the ext4 on it. Need are those that hold
// what the filesystem needs written: the superblock and group descriptors
// with every backup, the primary reserved GDT blocks (the resize inode's
// lists, which online growth uses), bitmaps that are initialised and not
// all zero, inode table blocks that hold inodes in use, the blocks of the
// inodes in use, and of the journal only its superblock and extent tree.
// Zeros are the objects of the rest of the metadata, which reads as zeros
// on a fresh image: unused inode tables, the journal's log, the backups'
// reserved GDT blocks, bitmaps of free groups. Each object is named by the
// first thing found in it, or by the kinds of zeros in it.
type ext4Objects struct {
	Need  map[int64]string
	Zeros map[int64]string
}

// zeroArea is metadata of one kind that reads as zeros on a fresh image,
// in the groups from..to (-1: no group).
type zeroArea struct {
	kind, note string
	from, to   int64
}

func (a zeroArea) String() string {
	switch {
	case a.from < 0:
		return "the " + a.kind
	case a.from == a.to:
		return fmt.Sprintf("the %s of group %d (%s)", a.kind, a.from, a.note)
	}
	return fmt.Sprintf("the %ss of groups %d-%d (%s)", a.kind, a.from, a.to, a.note)
}

// ext4Needs reads the geometry of the filesystem on dev (a block device
// or an image file) with dumpe2fs, and the blocks of its inodes in use
// with debugfs.
func ext4Needs(ctx context.Context, dev string, objSize int64) (ext4Objects, error) {
	res := ext4Objects{Need: map[int64]string{}, Zeros: map[int64]string{}}
	out, err := tool(ctx, nil, "dumpe2fs", dev)
	if err != nil {
		return res, err
	}
	g, err := parseDumpe2fs(out)
	if err != nil {
		return res, err
	}
	var cmds strings.Builder
	used := g.usedInodes()
	for _, ino := range used {
		fmt.Fprintf(&cmds, "stat <%d>\n", ino)
	}
	// -c: catastrophic mode, no bitmaps read (those of a 1 TiB
	// filesystem are megabytes); stat needs none.
	stats, err := tool(ctx, strings.NewReader(cmds.String()), "debugfs", "-c", "-f", "-", dev)
	if err != nil {
		return res, err
	}
	blocks, err := parseInodeStats(stats)
	if err != nil {
		return res, err
	}
	adder := func(m map[int64]string) func(first, last int64, what string) {
		return func(first, last int64, what string) {
			for o := first * g.blockSize / objSize; o <= (last*g.blockSize+g.blockSize-1)/objSize; o++ {
				if _, ok := m[o]; !ok {
					m[o] = what
				}
			}
		}
	}
	need := adder(res.Need)
	areas := map[int64][]zeroArea{}
	zeros := func(first, last int64, kind, note string, group int64) {
		for o := first * g.blockSize / objSize; o <= (last*g.blockSize+g.blockSize-1)/objSize; o++ {
			i := slices.IndexFunc(areas[o], func(a zeroArea) bool { return a.kind == kind })
			if i < 0 {
				areas[o] = append(areas[o], zeroArea{kind: kind, note: note, from: group, to: group})
			} else {
				areas[o][i].from, areas[o][i].to = min(areas[o][i].from, group), max(areas[o][i].to, group)
			}
		}
	}
	g.addMetadata(used, need, zeros)
	for _, ino := range used {
		ib, ok := blocks[ino]
		if !ok {
			return res, fmt.Errorf("debugfs gave no blocks for inode %d", ino)
		}
		what := fmt.Sprintf("inode %d", ino)
		data := ib.data
		switch ino {
		case g.journalInode:
			what = "the journal's superblock and extent tree"
			for _, r := range data {
				zeros(r[0], r[1], "journal's log", "", -1)
			}
			data = nil
			if ib.first >= 0 {
				data = [][2]int64{{ib.first, ib.first}}
			}
		case resizeInode:
			// Its data blocks are the backups' reserved GDT blocks,
			// written only by a grow; its indirect blocks are the
			// primary reserved GDT blocks and one more.
			what = "the resize inode's indirect blocks"
			data = nil
		}
		for _, r := range append(slices.Clone(ib.meta), data...) {
			need(r[0], r[1], what)
		}
	}
	for o, as := range areas {
		if _, ok := res.Need[o]; !ok {
			var parts []string
			for _, a := range as {
				parts = append(parts, a.String())
			}
			res.Zeros[o] = strings.Join(parts, "; ")
		}
	}
	return res, nil
}

// resizeInode is the inode holding the reserved GDT blocks (EXT2_RESIZE_INO).
const resizeInode = 7

func tool(ctx context.Context, stdin *strings.Reader, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// debugfs pages its output through $PAGER unless told not to.
	cmd.Env = append(cmd.Environ(), "DEBUGFS_PAGER=__none__")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ext4Geometry is what dumpe2fs says of a filesystem.
type ext4Geometry struct {
	blockSize, blocksPerGroup, inodesPerGroup, inodeSize int64
	journalInode                                         int64
	groups                                               []ext4Group
}

type ext4Group struct {
	num                        int64
	flags                      string
	supers                     [][2]int64 // superblock and its descriptors, a range each
	reservedGDT                [2]int64   // zero: none
	blockBitmap, inodeBitmap   int64
	inodeTable                 int64 // first block
	freeBlocks                 int64
	freeInodes                 [][2]int64
	hasBlockBitmap, hasITables bool
}

var (
	reGroup   = regexp.MustCompile(`^Group (\d+): \(Blocks \d+-\d+\)[^\[]*(\[[^\]]*\])?`)
	reSuper   = regexp.MustCompile(`superblock at (\d+), Group descriptors? at (\d+)(?:-(\d+))?`)
	reResGDT  = regexp.MustCompile(`^Reserved GDT blocks at (\d+)-(\d+)`)
	reBBitmap = regexp.MustCompile(`^Block bitmap at (\d+)`)
	reIBitmap = regexp.MustCompile(`^Inode bitmap at (\d+)`)
	reITable  = regexp.MustCompile(`^Inode table at (\d+)-(\d+)`)
	reFree    = regexp.MustCompile(`^(\d+) free blocks, (\d+) free inodes`)
)

func parseDumpe2fs(out string) (ext4Geometry, error) {
	var g ext4Geometry
	header := map[string]string{}
	var cur *ext4Group
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	for _, line := range strings.Split(out, "\n") {
		if m := reGroup.FindStringSubmatch(line); m != nil {
			g.groups = append(g.groups, ext4Group{num: num(m[1]), flags: m[2]})
			cur = &g.groups[len(g.groups)-1]
			continue
		}
		if cur == nil {
			if k, v, ok := strings.Cut(line, ":"); ok {
				header[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		t := strings.TrimSpace(line)
		if m := reSuper.FindStringSubmatch(t); m != nil {
			last := m[2]
			if m[3] != "" {
				last = m[3]
			}
			cur.supers = append(cur.supers, [2]int64{num(m[1]), num(last)})
		}
		if m := reResGDT.FindStringSubmatch(t); m != nil {
			cur.reservedGDT = [2]int64{num(m[1]), num(m[2])}
		}
		if m := reBBitmap.FindStringSubmatch(t); m != nil {
			cur.blockBitmap, cur.hasBlockBitmap = num(m[1]), true
		}
		if m := reIBitmap.FindStringSubmatch(t); m != nil {
			cur.inodeBitmap = num(m[1])
		}
		if m := reITable.FindStringSubmatch(t); m != nil {
			cur.inodeTable, cur.hasITables = num(m[1]), true
		}
		if m := reFree.FindStringSubmatch(t); m != nil {
			cur.freeBlocks = num(m[1])
		}
		if v, ok := strings.CutPrefix(t, "Free inodes:"); ok {
			for _, r := range strings.Split(v, ",") {
				a, b, isRange := strings.Cut(strings.TrimSpace(r), "-")
				if a == "" {
					continue
				}
				if !isRange {
					b = a
				}
				cur.freeInodes = append(cur.freeInodes, [2]int64{num(a), num(b)})
			}
		}
	}
	g.blockSize, g.blocksPerGroup, g.inodesPerGroup = num(header["Block size"]), num(header["Blocks per group"]), num(header["Inodes per group"])
	g.inodeSize, g.journalInode = num(header["Inode size"]), num(header["Journal inode"])
	if g.blockSize == 0 || g.blocksPerGroup == 0 || g.inodesPerGroup == 0 || g.inodeSize == 0 || len(g.groups) == 0 {
		return g, fmt.Errorf("dumpe2fs: no ext4 geometry in its output (block size %q, %d groups)", header["Block size"], len(g.groups))
	}
	return g, nil
}

func (grp ext4Group) flag(name string) bool { return strings.Contains(grp.flags, name) }

// usedInodes lists the inodes in use: in each initialised group, those
// between its free inode ranges, which dumpe2fs lists in ascending order.
func (g ext4Geometry) usedInodes() []int64 {
	var used []int64
	for _, grp := range g.groups {
		if grp.flag("INODE_UNINIT") {
			continue
		}
		next := grp.num*g.inodesPerGroup + 1
		end := next + g.inodesPerGroup
		for _, r := range append(slices.Clone(grp.freeInodes), [2]int64{end, end}) {
			for ; next < min(r[0], end); next++ {
				used = append(used, next)
			}
			next = max(next, r[1]+1)
		}
	}
	return used
}

// addMetadata adds the block ranges of the group metadata: to need what
// must be written (superblocks and descriptors, the primary reserved GDT
// blocks, bitmaps that are initialised and not all zero, inode table
// blocks that hold inodes in use), to zeros the rest.
func (g ext4Geometry) addMetadata(used []int64, need func(first, last int64, what string), zeros func(first, last int64, kind, note string, group int64)) {
	bitsPerBlock := 8 * g.blockSize
	for _, grp := range g.groups {
		for _, s := range grp.supers {
			what := fmt.Sprintf("the backup superblock and group descriptors of group %d", grp.num)
			if grp.num == 0 {
				what = "the superblock and group descriptors"
			}
			need(s[0], s[1], what)
		}
		if r := grp.reservedGDT; r[1] > 0 {
			if grp.num == 0 {
				need(r[0], r[1], "the reserved GDT blocks")
			} else {
				zeros(r[0], r[1], "reserved GDT backup", "written by a grow", grp.num)
			}
		}
		// A bitmap of a group all free is all zeros unless the
		// bitmap block has bits past the group, which are set.
		if grp.hasBlockBitmap {
			if !grp.flag("BLOCK_UNINIT") && (grp.freeBlocks < g.blocksPerGroup || g.blocksPerGroup < bitsPerBlock) {
				need(grp.blockBitmap, grp.blockBitmap, fmt.Sprintf("the block bitmap of group %d", grp.num))
			} else {
				zeros(grp.blockBitmap, grp.blockBitmap, "block bitmap", "all free", grp.num)
			}
		}
		if grp.hasITables {
			zeros(grp.inodeTable, grp.inodeTable+g.inodesPerGroup*g.inodeSize/g.blockSize-1, "inode table", "unused", grp.num)
		}
		first := grp.num*g.inodesPerGroup + 1
		var inGroup []int64
		for _, ino := range used {
			if ino >= first && ino < first+g.inodesPerGroup {
				inGroup = append(inGroup, ino)
			}
		}
		if !grp.flag("INODE_UNINIT") && (len(inGroup) > 0 || g.inodesPerGroup < bitsPerBlock) {
			need(grp.inodeBitmap, grp.inodeBitmap, fmt.Sprintf("the inode bitmap of group %d", grp.num))
		} else {
			zeros(grp.inodeBitmap, grp.inodeBitmap, "inode bitmap", "all free", grp.num)
		}
		for _, ino := range inGroup {
			b := grp.inodeTable + (ino-first)*g.inodeSize/g.blockSize
			need(b, b, fmt.Sprintf("the inode table of group %d", grp.num))
		}
	}
}

// inodeBlocks are the block ranges of one inode: its mapping blocks
// (extent tree, indirect blocks) and its data, with the physical block of
// its first logical block (-1: none).
type inodeBlocks struct {
	meta, data [][2]int64
	first      int64
}

// reEntry is one entry of debugfs's EXTENTS or BLOCKS list:
// "(ETB0):123", "(IND):4", "(0):5", "(0-31)[u]:6-37".
var reEntry = regexp.MustCompile(`\(([^)]*)\)(?:\[[^\]]*\])?:(\d+)(?:-(\d+))?`)

// parseInodeStats reads the output of debugfs "stat <N>" requests.
func parseInodeStats(out string) (map[int64]inodeBlocks, error) {
	res := map[int64]inodeBlocks{}
	var ino int64 = -1
	var cur inodeBlocks
	inList := false
	flush := func() {
		if ino >= 0 {
			res[ino] = cur
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "debugfs: stat <"); ok {
			flush()
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), ">"), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("debugfs: unexpected request line %q", line)
			}
			ino, cur, inList = n, inodeBlocks{first: -1}, false
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case t == "EXTENTS:" || t == "BLOCKS:":
			inList = true
			continue
		case strings.HasPrefix(t, "TOTAL:"):
			inList = false
			continue
		}
		if !inList || ino < 0 {
			continue
		}
		for _, m := range reEntry.FindAllStringSubmatch(t, -1) {
			a, _ := strconv.ParseInt(m[2], 10, 64)
			b := a
			if m[3] != "" {
				b, _ = strconv.ParseInt(m[3], 10, 64)
			}
			label := m[1]
			logical, _, _ := strings.Cut(label, "-")
			if n, err := strconv.ParseInt(logical, 10, 64); err == nil {
				cur.data = append(cur.data, [2]int64{a, b})
				if n == 0 {
					cur.first = a
				}
			} else {
				cur.meta = append(cur.meta, [2]int64{a, b})
			}
		}
	}
	flush()
	return res, nil
}
