package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A node plugin whose key directory is on disk does not start, unless
// told; one in memory (tmpfs) gets past the check.
func TestNodeRefusesAKeyDirOnDisk(t *testing.T) {
	state := t.TempDir()
	shm, err := os.MkdirTemp("/dev/shm", "rbdcsi-keydir-test-")
	if err != nil {
		t.Skipf("no /dev/shm to hold a memory-backed key directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	for _, c := range []struct {
		name    string
		args    []string
		refused bool
	}{
		{"on disk", []string{"--key-dir=" + filepath.Join(state, "keys")}, true},
		{"on disk, allowed", []string{"--key-dir=" + filepath.Join(state, "keys"), "--allow-key-dir-on-disk"}, false},
		{"in memory", []string{"--key-dir=" + shm}, false},
	} {
		f, err := parseFlags(append([]string{"--mode=node", "--nodeid=n1", "--state-dir=" + state}, c.args...))
		if err != nil {
			t.Fatal(err)
		}
		// Without a cluster map the node fails later; only the key
		// directory's refusal matters here.
		_, _, err = newNode(f, nil, nodeBackend{}, nil, nil, nil, func(string) {})
		refused := err != nil && strings.Contains(err.Error(), "--key-dir") && strings.Contains(err.Error(), "not in memory")
		if refused != c.refused {
			t.Errorf("%s: refused %v, want %v (%v)", c.name, refused, c.refused, err)
		}
	}
}
