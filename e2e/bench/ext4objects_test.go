package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestExt4NeedsWhatMkfsWrote makes real filesystems on sparse image files
// and holds the objects ext4Needs derives from their geometry to the
// objects mkfs left something other than zeros in: equal both ways, so
// that the bench's P3 check neither misses an object mkfs needs nor
// excuses one it does not.
func TestExt4NeedsWhatMkfsWrote(t *testing.T) {
	driver := []string{"-m0", "-E", "nodiscard,assume_storage_prezeroed=1", "-G", "4096"} // internal/node's for fresh volumes
	cases := []struct {
		name string
		size int64
		args []string
	}{
		{"the driver's options, 1 GiB", gib, driver},
		{"the driver's options, 1 TiB", tib, driver},
		{"lazy init and flex_bg 16, 1 TiB", tib, []string{"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"}},
		{"1 KiB blocks, first data block 1", 64 * mib, []string{"-b", "1024", "-E", "nodiscard"}},
		{"no checksums: every group initialised", gib, []string{"-O", "^metadata_csum,^uninit_bg", "-E", "nodiscard"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "fs.img")
			if err := os.WriteFile(img, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, tc.size); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"-q"}, tc.args...), img)
			if out, err := exec.Command("mkfs.ext4", args...).CombinedOutput(); err != nil {
				t.Fatalf("mkfs.ext4 %v: %v: %s", args, err, out)
			}
			objs, err := ext4Needs(context.Background(), img, 4*mib)
			if err != nil {
				t.Fatal(err)
			}
			written := nonZeroObjects(t, img, 4*mib)
			c := checkObjects(written, objs, tc.size, 4*mib)
			if len(c.Beyond) > 0 || c.Missing > 0 {
				var needed []int64
				for o := range objs.Need {
					needed = append(needed, o)
				}
				slices.Sort(needed)
				t.Errorf("mkfs wrote objects %v; derived from the geometry %v: beyond them %v, %d not written", written, needed, c.Beyond, c.Missing)
			}
			if len(objs.Need) < 2 {
				t.Errorf("only %d objects needed: the geometry was not read", len(objs.Need))
			}
		})
	}
}

// TestCheckObjectsNamesWhatIsBeyond: an object written outside the needed
// set is reported with what it holds, the device's last one as such.
func TestCheckObjectsNamesWhatIsBeyond(t *testing.T) {
	objs := ext4Objects{Need: map[int64]string{0: "the superblock", 32: "a backup"}, Zeros: map[int64]string{9: "the journal's log"}}
	c := checkObjects([]int64{0, 9, 255}, objs, gib, 4*mib)
	want := []string{"object 9 at 36 MiB: the journal's log", "object 255 at 1020 MiB: no filesystem metadata, the device's last object"}
	if !slices.Equal(c.Beyond, want) || c.Missing != 1 || c.Held != 3 || c.Needed != 2 {
		t.Errorf("got beyond %q, missing %d, held %d, needed %d; want beyond %q, missing 1, held 3, needed 2", c.Beyond, c.Missing, c.Held, c.Needed, want)
	}
}

// nonZeroObjects lists the objects of a sparse file that hold a byte
// other than zero, reading only its data extents.
func nonZeroObjects(t *testing.T, path string, objSize int64) []int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	const seekData, seekHole = 3, 4
	var objs []int64
	buf := make([]byte, objSize)
	zero := make([]byte, objSize)
	for off := int64(0); off < st.Size(); {
		data, err := f.Seek(off, seekData)
		if err != nil {
			break // ENXIO: no data past off
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil {
			t.Fatal(err)
		}
		for o := data / objSize; o*objSize < hole; o++ {
			if len(objs) > 0 && objs[len(objs)-1] == o {
				continue
			}
			from, to := max(o*objSize, data), min((o+1)*objSize, hole)
			n, err := f.ReadAt(buf[:to-from], from)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], zero[:n]) {
				objs = append(objs, o)
			}
		}
		off = hole
	}
	return objs
}
