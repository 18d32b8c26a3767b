package node

import (
	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// leftovers lists what the node still holds under dir (see
// harness.FindLeftovers); a failed scan counts as a leftover, so that it
// cannot pass for a clean node.
func leftovers(dir string) []string {
	l, err := harness.FindLeftovers(dir)
	left := l.Describe()
	if err != nil {
		left = append(left, "scanning the node: "+err.Error())
	}
	return left
}

// mountsUnder lists the mounts at or below dir as "point (type from source)".
func mountsUnder(dir string) []string {
	ms, err := harness.MountsUnder(dir)
	if err != nil {
		return []string{"cannot read mountinfo: " + err.Error()}
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.String()
	}
	return out
}

// mountSource is the device mounted at path, "" if none.
func mountSource(path string) string {
	ms, _ := harness.MountsUnder(path)
	src := ""
	for _, m := range ms {
		if m.Point == path {
			src = m.Source // the last one is the top of the stack
		}
	}
	return src
}

// rbdFuseProcs are live (not zombie) rbd-fuse processes with an argument
// under dir. A failed scan of /proc finds none, which the callers' counts
// catch.
func rbdFuseProcs(dir string) []int {
	pids, _ := harness.RBDFuseProcs(dir)
	return pids
}
