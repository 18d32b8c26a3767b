package mapper

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// findProcs returns the live processes whose argv[0] ends in exe and whose
// argv holds arg exactly. It finds an rbd-fuse by its mount directory, also
// one an earlier run of the plugin started (after a restart there is no
// child handle to wait on).
func findProcs(procRoot, exe, arg string) []int {
	entries, _ := os.ReadDir(filepath.Join(procRoot, "proc"))
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, "proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if filepath.Base(argv[0]) != exe {
			continue
		}
		for _, a := range argv[1:] {
			if a == arg {
				if alive(procRoot, pid) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// alive is false for a gone process and for a zombie (it holds nothing any
// more; reaping it is its parent's business).
func alive(procRoot string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, "proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
