package mapper

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// krbdDevices is where the kernel lists its RBD mappings, one directory per
// device ID (Documentation/ABI/testing/sysfs-bus-rbd).
const krbdDevices = "sys/bus/rbd/devices"

// listKRBD reads krbd's mappings from sysfs: what `rbd device list` prints
// for krbd, without starting the rbd tool, which loads librados only to
// read these same files. Every publish, repeated stage and health check
// lists the mappings, so the tool's start-up (tens of milliseconds on a
// node, a second or two under emulation) was paid on each. A device that
// goes away while it is read is left out, as the tool would; snapshot
// mappings are never ours and are left out too.
func listKRBD(sysRoot string) ([]Mapped, error) {
	dir := filepath.Join(sysRoot, krbdDevices)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no rbd module: nothing is mapped
	}
	if err != nil {
		return nil, fmt.Errorf("krbd list: %w", err)
	}
	var list []Mapped
	for _, e := range entries {
		if strings.Trim(e.Name(), "0123456789") != "" {
			continue // not a device ID
		}
		attrs, err := readAttrs(filepath.Join(dir, e.Name()), "pool", "name", "current_snap")
		if errors.Is(err, fs.ErrNotExist) {
			continue // unmapped meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("krbd list: %w", err)
		}
		if attrs["current_snap"] != "-" {
			continue
		}
		// pool_ns came with Linux 4.19; older kernels map no namespaces.
		ns, err := readAttrs(filepath.Join(dir, e.Name()), "pool_ns")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("krbd list: %w", err)
		}
		// client_addr came with Linux 5.0.
		addr, _ := readAttrs(filepath.Join(dir, e.Name()), "client_addr")
		list = append(list, Mapped{
			Image:      Image{Pool: attrs["pool"], Namespace: ns["pool_ns"], Name: attrs["name"]},
			Device:     "/dev/rbd" + e.Name(),
			ClientAddr: addr["client_addr"],
		})
	}
	return list, nil
}

// readAttrs reads one-line sysfs attributes of a directory.
func readAttrs(dir string, names ...string) (map[string]string, error) {
	attrs := make(map[string]string, len(names))
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		attrs[n] = strings.TrimSpace(string(b))
	}
	return attrs, nil
}
