//go:build e2e_k8s

package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
)

// The install guide, whose marked shell blocks each pass runs as written:
//
//	<!-- e2e: vars -->              the values a user sets; the e2e sets the same names to its own
//	<!-- e2e: PATH -->              run by the install of PATH (all, kustomize or helm)
//	<!-- e2e: PATH uninstall -->    run by its uninstall
//
// each marker on the line before a ```sh fence. Unmarked blocks are shown,
// never run (they need what the e2e has no use for, like a download).
// docs/backup.md, which turns changed-block tracking on for an install
// of the guide, and docs/csi-addons.md, which adds the csi-addons
// sidecars, have marked blocks of the same kinds but vars: they run with
// the guide's values, where the guide's install ended.
const (
	installFile   = "../../docs/install.md"
	backupFile    = "../../docs/backup.md"
	csiAddonsFile = "../../docs/csi-addons.md"
)

// guideBlock is one marked shell block of the guide.
type guideBlock struct {
	line      int    // of the opening fence, for messages
	path      string // vars, all, kustomize or helm
	uninstall bool
	text      string
}

var (
	guideMarker = regexp.MustCompile(`^<!-- e2e: (vars|all|kustomize|helm)( uninstall)? -->$`)
	guideVar    = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=`)
)

// parseGuide reads the marked blocks of a guide; a malformed marker, or
// one not followed by a shell block, fails t.
func parseGuide(t *testing.T, file string) []guideBlock {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []guideBlock
	for i := 0; i < len(lines); i++ {
		if !strings.Contains(lines[i], "<!-- e2e:") {
			continue
		}
		m := guideMarker.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("%s:%d: malformed marker %q (want <!-- e2e: vars|all|kustomize|helm [uninstall] -->)", file, i+1, lines[i])
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("%s:%d: the marker is not followed by a ```sh block", file, i+1)
		}
		b := guideBlock{line: i + 2, path: m[1], uninstall: m[2] != ""}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("%s:%d: the block does not end", file, b.line)
		}
		b.text = strings.Join(lines[i+2:end], "\n")
		if b.path == "vars" && b.uninstall {
			t.Fatalf("%s:%d: a vars block is not an uninstall step", file, b.line)
		}
		blocks = append(blocks, b)
		i = end
	}
	return blocks
}

// guideVars are the names the guide's one vars block assigns, in order.
func guideVars(t *testing.T, blocks []guideBlock) []string {
	t.Helper()
	var names []string
	n := 0
	for _, b := range blocks {
		if b.path != "vars" {
			continue
		}
		n++
		for _, l := range strings.Split(b.text, "\n") {
			if m := guideVar.FindStringSubmatch(l); m != nil {
				names = append(names, m[1])
			}
		}
	}
	if n != 1 || len(names) == 0 {
		t.Fatalf("%s: want one vars block assigning variables, have %d blocks, %d names", installFile, n, len(names))
	}
	return names
}

// guideRun is one path of the guide on this cluster, as make e2e sets it
// up: the path (RBDCSI_E2E_INSTALL), the values of the vars block
// (E2E_GUIDE_VARS, a file of NAME=VALUE lines), the directory it runs in
// and a PATH whose kubectl and helm are this cluster's (E2E_GUIDE_PATH).
type guideRun struct {
	path   string
	values map[string]string
	dir    string
	bin    string
}

func loadGuideRun(t *testing.T) guideRun {
	t.Helper()
	e := loadEnv(t)
	g := guideRun{path: os.Getenv("RBDCSI_E2E_INSTALL"), values: map[string]string{},
		dir: filepath.Join(e.work, "guide-"+os.Getenv("RBDCSI_E2E_INSTALL")), bin: os.Getenv("E2E_GUIDE_PATH")}
	if g.path != "kustomize" && g.path != "helm" {
		t.Fatalf("RBDCSI_E2E_INSTALL=%q: the guide has the paths kustomize and helm", g.path)
	}
	file := os.Getenv("E2E_GUIDE_VARS")
	if file == "" || g.bin == "" {
		t.Fatal("E2E_GUIDE_VARS and E2E_GUIDE_PATH are not set (run through scripts/k8s-e2e.sh)")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, value, ok := strings.Cut(l, "=")
		if !ok || !guideVar.MatchString(name+"=") {
			t.Fatalf("%s: not NAME=VALUE: %q", file, l)
		}
		g.values[name] = value
	}
	return g
}

// checkNames: the e2e sets exactly the names the guide's vars block
// assigns, so a value the guide adds or drops fails here, by name.
func (g guideRun) checkNames(t *testing.T, names []string) {
	t.Helper()
	var missing, extra []string
	for _, n := range names {
		if _, ok := g.values[n]; !ok {
			missing = append(missing, n)
		}
	}
	for n := range g.values {
		if !slices.Contains(names, n) {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("%s's vars block assigns %v; the e2e does not set %v and sets %v, which it does not assign", installFile, names, missing, extra)
	}
}

// run runs the blocks of the path of a guide (install.md, or backup.md or
// csi-addons.md after it), install or uninstall, in order, as one `bash -euo pipefail`
// with the e2e's values set. The install starts in a fresh directory and
// records where it ended; its uninstall and backup.md start there.
func (g guideRun) run(t *testing.T, file string, uninstall bool, timeout time.Duration) {
	t.Helper()
	blocks := parseGuide(t, file)
	names := guideVars(t, parseGuide(t, installFile))
	if file != installFile {
		if slices.ContainsFunc(blocks, func(b guideBlock) bool { return b.path == "vars" }) {
			t.Fatalf("%s has a vars block: it runs with %s's values", file, installFile)
		}
	}
	g.checkNames(t, names)
	cwdFile := filepath.Join(g.dir, ".cwd")
	var script strings.Builder
	for _, n := range names {
		fmt.Fprintf(&script, "%s=%s\n", n, shellQuote(g.values[n]))
	}
	script.WriteString("set -x\n")
	ran := 0
	for _, b := range blocks {
		if b.path == "vars" || b.uninstall != uninstall || (b.path != "all" && b.path != g.path) {
			continue
		}
		fmt.Fprintf(&script, ": %s:%d\n%s\n", filepath.Base(file), b.line, b.text)
		ran++
	}
	if ran == 0 {
		t.Fatalf("%s has no blocks for the %s path (uninstall %v)", file, g.path, uninstall)
	}
	start := g.dir
	if uninstall || file != installFile {
		data, err := os.ReadFile(cwdFile)
		if err != nil {
			t.Fatalf("where the install ended: %v", err)
		}
		start = strings.TrimSpace(string(data))
	} else {
		if err := os.RemoveAll(g.dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(g.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "set +x\npwd >%s\n", shellQuote(cwdFile))
	}
	name := "install"
	if file != installFile {
		name = strings.TrimSuffix(filepath.Base(file), ".md")
	}
	if uninstall {
		name = strings.TrimPrefix(name+"-uninstall", "install-")
	}
	scriptFile := filepath.Join(g.dir, ".guide-"+name+".sh")
	if err := os.WriteFile(scriptFile, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// runs: bash (the guides' blocks run ceph, rbd, rados, kubectl, helm, tar, sha256sum and openssl)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", scriptFile)
	cmd.Dir = start
	cmd.Env = append(os.Environ(), "PATH="+g.bin+":"+os.Getenv("PATH"))
	out := &lineLogger{t: t, prefix: "guide: "}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.flush()
	if err != nil {
		t.Fatalf("docs/%s, %s path, %s: %v (the script: %s)", filepath.Base(file), g.path, name, err, scriptFile)
	}
	t.Logf("docs/%s, %s path, %s: %d blocks ran", filepath.Base(file), g.path, name, ran)
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// lineLogger logs what a command writes, a line at a time, as it comes.
type lineLogger struct {
	mu     sync.Mutex
	t      *testing.T
	prefix string
	buf    []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(l.prefix + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(l.prefix + string(l.buf))
		l.buf = nil
	}
}

// TestAAInstallGuide runs first (file order): it installs the driver the
// way docs/install.md says, running its blocks for this pass's path (the
// values of step 1 are the e2e's: its cluster, its release, the machine's
// options), through the guide's own check of a claim, a pod, a snapshot
// and a restore, then turns changed-block tracking on as docs/backup.md
// says and adds the csi-addons sidecars as docs/csi-addons.md says (the
// csi-addons controller is the e2e's, as a cluster's admin installs it). The scenarios after it run on that install. Last, the node plugin
// is registered with kubelet.
func TestAAInstallGuide(t *testing.T) {
	g := loadGuideRun(t)
	g.run(t, installFile, false, 20*time.Minute)
	// Changed-block tracking on, as docs/backup.md turns it on.
	g.run(t, backupFile, false, 10*time.Minute)
	g.run(t, csiAddonsFile, false, 10*time.Minute)
	k := &kube{t: t, e: loadEnv(t)}
	eventually(t, shortWait, "kubelet listing the driver", func() (bool, string) {
		var n storagev1.CSINode
		if !k.get(&n, "csinode", k.e.nodeName) {
			return false, "no CSINode"
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driverName {
				return true, ""
			}
		}
		return false, fmt.Sprintf("CSINode %s lists %d drivers, not %s", k.e.nodeName, len(n.Spec.Drivers), driverName)
	})
}
