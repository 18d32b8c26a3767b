package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tree writes files (path -> content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func programs(uses []Use) []string {
	seen := map[string]bool{}
	for _, u := range uses {
		seen[u.Program] = true
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func TestScanGoFollowsNamesToTheirConstants(t *testing.T) {
	root := tree(t, map[string]string{
		"internal/x/x.go": `package x

import (
	"context"
	"os/exec"
)

const tool = "from-const"

type runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
	RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

type n struct{ run runner }

func (n n) direct(ctx context.Context) {
	_ = exec.Command("from-literal").Run()
	_ = exec.CommandContext(ctx, tool).Run()
	_, _ = n.run.Run(ctx, "through-runner")
	_, _ = n.run.RunInput(ctx, nil, "through-input")
	name := "from-local"
	if ctx == nil {
		name = "from-local-too"
	}
	_ = exec.Command(name).Run()
	prog, _ := pick(true)
	_ = exec.Command(prog).Run()
	admin("from-param")
	f := func(bin string) { _ = exec.Command(bin).Run() }
	f("from-closure")
	// runs: from-note (a library runs it)
	_ = exec.Command(lookup()).Run()
}

func pick(a bool) (string, error) {
	if a {
		return "from-result", nil
	}
	return "", nil
}

func admin(t string) { _ = exec.Command(t).Run() }

func lookup() string { return "" }

// A Runner's own Run and RunInput run what their callers name: no
// program of their own.
type execRunner struct{}

func (r execRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.RunInput(ctx, nil, name, args...)
}

func (execRunner) RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}
`,
	})
	uses, probs, err := ScanGo(root, []string{"internal"})
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
	want := "from-closure from-const from-literal from-local from-local-too from-note from-param from-result through-input through-runner"
	if got := strings.Join(programs(uses), " "); got != want {
		t.Errorf("programs = %s\nwant       %s", got, want)
	}
	src, err := os.ReadFile(filepath.Join(root, "internal/x/x.go"))
	if err != nil {
		t.Fatal(err)
	}
	runnerLine := "internal/x/x.go:" + strconv.Itoa(1+strings.Count(strings.Split(string(src), "exec.CommandContext(ctx, name")[0], "\n"))
	for _, u := range uses {
		if u.Part != partPlugin {
			t.Errorf("%s at %s: part %s, want plugin", u.Program, u.Where, u.Part)
		}
		if u.Where == runnerLine {
			t.Errorf("%s found in the Runner's own Run at %s", u.Program, u.Where)
		}
	}
}

func TestScanGoRefusesWhatItCannotFollow(t *testing.T) {
	root := tree(t, map[string]string{
		"e2e/y/y_test.go": `package y

import "os/exec"

type env struct{ bin string }

func run(e env) { _ = exec.Command(e.bin).Run() }
`,
	})
	_, probs, err := ScanGo(root, []string{"e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 1 || !strings.HasPrefix(probs[0].Where, "e2e/y/y_test.go:7") {
		t.Fatalf("problems = %v, want one at e2e/y/y_test.go:7", probs)
	}
}

func TestScanShellReadsThroughWrappers(t *testing.T) {
	root := tree(t, map[string]string{
		"scripts/a.sh": `#!/bin/bash
helper() { echo hi; }
start() {
	local name=$1
	shift
	setsid "$@" >/dev/null &
}
ctl() { command ctl-tool --x "$@"; }
helper
timeout -s KILL 5 rbd ls
nice -n 19 niced --x
env -i A=b B=c envtool --flag
start mon ceph-mon -i a
x=$(grep -c y file)
if command -v absent >/dev/null; then :; fi
bash -c 'inner-tool arg'
trap 'trap-tool' EXIT
"$ROOT/bin/rbdplugin" --mode all
scripts/with-cluster.sh go test
/usr/sbin/abs-tool
scripts/rootfs.sh run "$base" rooted --x
unshare --mount --propagation private -- unshared
ctl
# runs: noted-tool (through a variable)
"$TOOL"
`,
		"Makefile": "V := $(shell vcs-tool describe)\nall:\n\t@out=$$(lint-tool -l $(DIRS)); echo $$out\n\t$(BIN) --x\n",
	})
	uses, probs, err := ScanShell(root, []string{"scripts/a.sh"}, "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
	want := "abs-tool bash ceph-mon ctl-tool envtool env go grep inner-tool lint-tool nice niced noted-tool rbd rooted setsid timeout trap-tool unshare unshared vcs-tool"
	got := programs(uses)
	wantList := strings.Fields(want)
	sort.Strings(wantList)
	if strings.Join(got, " ") != strings.Join(wantList, " ") {
		t.Errorf("programs = %v\nwant       %v", got, wantList)
	}
	for _, u := range uses {
		if u.Program == "lint-tool" && u.Where != "Makefile:3" {
			t.Errorf("lint-tool found at %s, want Makefile:3", u.Where)
		}
	}
}

// A busybox script runs busybox's applets: only busybox itself is used.
func TestScanShellBusyboxScript(t *testing.T) {
	root := tree(t, map[string]string{
		"scripts/init.sh": "#!/bin/busybox sh\nmount -t proc proc /proc\ninsmod /x.ko\nreboot -f\n",
	})
	uses, probs, err := ScanShell(root, []string{"scripts/init.sh"}, "")
	if err != nil || len(probs) != 0 {
		t.Fatalf("err %v, problems %v", err, probs)
	}
	if got := programs(uses); strings.Join(got, " ") != "busybox" {
		t.Errorf("programs = %v, want busybox alone", got)
	}
}

type fakeDpkg struct {
	owners map[string]string
	base   map[string]bool
}

func (f fakeDpkg) Owner(p string) (string, error) { return f.owners[p], nil }
func (f fakeDpkg) Base(p string) (bool, error)    { return f.base[p], nil }

func TestCheck(t *testing.T) {
	list, err := ParseList(strings.NewReader(`
rbd      ceph-common  deps,image
mkfs.xfs xfsprogs     deps
awk      mawk         base
jq       jq           deps
curl     curl         e2e
fio      fio          bench
`))
	if err != nil {
		t.Fatal(err)
	}
	uses := []Use{
		{"rbd", "internal/m.go:1", partPlugin},
		{"mkfs.xfs", "internal/n.go:2", partPlugin},
		{"awk", "scripts/a.sh:3", partScripts},
		{"curl", "scripts/b.sh:4", partScripts},
		{"sgdisk", "internal/o.go:5", partPlugin},
		{"fio", "e2e/p.go:6", partTests},
	}
	lists := map[string]map[string]bool{
		"deps":  {"ceph-common": true, "xfsprogs": true},
		"image": {"ceph-common": true},
		"e2e":   {},
		"bench": {"fio": true},
	}
	dpkg := fakeDpkg{
		owners: map[string]string{"rbd": "ceph-common", "mkfs.xfs": "xfsprogs", "awk": "gawk", "sgdisk": "gdisk"},
		base:   map[string]bool{"mawk": true},
	}
	got := strings.Join(Check(list, uses, nil, lists, dpkg, false), "\n")
	for _, want := range []string{
		`internal/o.go:5: sgdisk is run but not listed in scripts/programs.txt: add "sgdisk gdisk <steps>"`,
		`internal/n.go:2: the plugin runs mkfs.xfs, so its package xfsprogs must be in the image`,
		`jq is listed but nothing runs it`,
		`jq: package jq is not installed by step deps`,
		`curl: package curl is not installed by step e2e`,
		`awk: dpkg says it comes from package gawk, not mawk`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "rbd") {
		t.Errorf("rbd is listed and provided, yet:\n%s", got)
	}
	strict := strings.Join(Check(list, uses, nil, lists, dpkg, true), "\n")
	if !strings.Contains(strict, "curl: not installed on this machine") {
		t.Errorf("strict check does not say curl could not be confirmed:\n%s", strict)
	}
	// fio lives in a cached root only: this machine's dpkg cannot see it.
	if strings.Contains(got+strict, "fio") {
		t.Errorf("fio, installed into a cached root, yet:\n%s", strict)
	}
}

func TestParseListRefusesMistakes(t *testing.T) {
	for _, bad := range []string{
		"rbd ceph-common",                  // no steps
		"rbd ceph-common deps,imgae",       // unknown step
		"rbd ceph-common deps\nrbd x deps", // twice
		"docker - deps",                    // the user's, yet installed by deps
	} {
		if _, err := ParseList(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseList(%q) accepted it", bad)
		}
	}
}

func TestPackageLists(t *testing.T) {
	root := tree(t, map[string]string{
		"Makefile":         "DEB_PACKAGES := a b \\\n\tc\nOTHER := x\n",
		"build/Dockerfile": "FROM golang AS build\nRUN apt-get install -y librbd-dev\nFROM debian AS runtime\nRUN apt-get update \\\n && apt-get install -y --no-install-recommends \\\n  ceph-common mount \\\n && rm -rf /x\nFROM runtime\nRUN apt-get install -y notruntime\n",
		"scripts/k.sh":     "readonly E2E_PACKAGES=(etcd-server\n\tcurl)\n",
	})
	lists, err := PackageLists(root, []string{"scripts/k.sh"})
	if err != nil {
		t.Fatal(err)
	}
	for step, want := range map[string]string{"deps": "a b c", "image": "ceph-common mount", "e2e": "curl etcd-server"} {
		var got []string
		for p := range lists[step] {
			got = append(got, p)
		}
		sort.Strings(got)
		if strings.Join(got, " ") != want {
			t.Errorf("%s packages = %v, want %s", step, got, want)
		}
	}
}

// Test helper packages (<x>test) are test code, like _test.go files: what
// they run is no program of the plugin's.
func TestPartOf(t *testing.T) {
	for rel, want := range map[string]string{
		"internal/kms/kmip/kmiptest/server.go": partTests,
		"internal/rbd/rbdtest/images.go":       partTests,
		"internal/luks/cryptsetup_test.go":     partTests,
		"e2e/node/node.go":                     partTests,
		"internal/luks/luks.go":                partPlugin,
		"internal/kms/kmip/client.go":          partPlugin,
		"scripts/programs/main.go":             partScripts,
	} {
		if got := partOf(rel); got != want {
			t.Errorf("partOf(%s) = %s, want %s", rel, got, want)
		}
	}
}
