package luks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// status is what `cryptsetup status` says of one name.
type status struct {
	active  bool
	backing string // "device:" line
	mode    string // "mode:" line: "read/write" or "readonly", maybe " (suspended)"
	// The live dm-crypt table, for CheckActive.
	typ, cipher, keysize, offset, integrity string
}

func (s status) readOnly() bool { return strings.HasPrefix(s.mode, "readonly") }

func modeWord(readOnly bool) string {
	if readOnly {
		return "readonly"
	}
	return "read/write"
}

// status asks device-mapper, through cryptsetup, about name: exit 0 and
// "device:  /dev/rbd0" when it is open, exit 4 ("... is inactive.") when
// it is not.
func (l *LUKS) status(ctx context.Context, name string) (status, error) {
	out, err := l.run.Run(ctx, tool, "status", name)
	if exitCode(err) == 4 {
		return status{}, nil
	}
	if err != nil {
		return status{}, fmt.Errorf("asking whether %s is open: %w", name, err)
	}
	st := parseStatus(string(out))
	if st.backing == "" {
		return status{}, fmt.Errorf("`cryptsetup status %s` names no backing device: %.200q", name, out)
	}
	return st, nil
}

// parseStatus reads `cryptsetup status` output, whose lines after the
// first are "  key:  value" (keys may hold spaces: "key location").
func parseStatus(out string) status {
	st := status{active: true}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "device":
			st.backing = strings.TrimSpace(v)
		case "mode":
			st.mode = strings.TrimSpace(v)
		case "type":
			st.typ = strings.TrimSpace(v)
		case "cipher":
			st.cipher = strings.TrimSpace(v)
		case "keysize":
			st.keysize = strings.TrimSpace(v)
		case "offset":
			st.offset = strings.TrimSpace(v)
		case "integrity":
			st.integrity = strings.TrimSpace(v)
		}
	}
	return st
}

// CheckActive holds the open device name to what Format's header gives:
// LUKS2, aes-xts-plain64 with a 512-bit key, the data at DataOffset, no
// integrity. The header was checked before the open; this reads what the
// kernel actually runs, in case the header changed in between. A mismatch
// is ErrForeignHeader; the caller closes the device.
func (l *LUKS) CheckActive(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	st, err := l.status(ctx, name)
	if err != nil {
		return err
	}
	if !st.active {
		return fmt.Errorf("%s is not open", name)
	}
	for _, f := range []struct{ what, got, want string }{
		{"type", st.typ, "LUKS2"},
		{"cipher", st.cipher, cipher},
		{"keysize", st.keysize, fmt.Sprintf("%d bits", keyBytes*8)},
		{"offset", st.offset, fmt.Sprintf("%d sectors", DataOffset/512)}, // always 512-byte sectors
		{"integrity", st.integrity, ""},
	} {
		if f.got != f.want {
			return fmt.Errorf("%w: the open device %s has %s %.40q, not %q", ErrForeignHeader, name, f.what, f.got, f.want)
		}
	}
	return nil
}

// Active lists our open devices: the names in the mapper directory that
// start with Prefix, each with its backing device. A name left there
// after its device closed (a node made without udev) is not open and not
// listed. Other devices are never looked at.
func (l *LUKS) Active(ctx context.Context) ([]Mapping, error) {
	entries, err := os.ReadDir(l.mapperDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no device-mapper device at all
	}
	if err != nil {
		return nil, fmt.Errorf("listing open LUKS devices: %w", err)
	}
	var list []Mapping
	for _, e := range entries {
		name := e.Name()
		if checkName(name) != nil {
			continue
		}
		st, err := l.status(ctx, name)
		if err != nil {
			return nil, err
		}
		if st.active {
			list = append(list, Mapping{Name: name, Backing: st.backing})
		}
	}
	return list, nil
}

// sameDevice: cryptsetup names the backing device as /dev/<kernel name>,
// while a caller may use another path to the same device node (a
// symlink such as /dev/rbd/pool/image): equal device numbers match too.
func sameDevice(a, b string) bool {
	if a == b {
		return true
	}
	ra, oka := rdev(a)
	rb, okb := rdev(b)
	return oka && okb && ra == rb
}

// rdev is the device number of a block device node.
func rdev(path string) (uint64, bool) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeDevice == 0 || fi.Mode()&fs.ModeCharDevice != 0 {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Rdev), true
}
