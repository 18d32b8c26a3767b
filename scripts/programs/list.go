package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Providers that are not Debian packages.
const (
	providerGo   = "go" // the Go toolchain (go, gofmt)
	providerUser = "-"  // never installed by the project: the user brings it
)

// Steps a program can be needed by. Each but base has its own package
// list, which must hold the program's package (see packages.go).
var knownSteps = map[string]string{
	"base":   "every Debian system (Essential or Priority required)",
	"deps":   "make deps: DEB_PACKAGES in the Makefile",
	"image":  "the plugin's container image: build/Dockerfile's runtime stage",
	"e2e":    "make e2e: E2E_PACKAGES in scripts/k8s-build.sh",
	"rootfs": "cached root filesystems: ROOTFS_PACKAGES in scripts/rootfs.sh",
	"kernel": "make kernel-test: KERNEL_PACKAGES in its script",
	"build":  "make image: BUILD_PACKAGES in scripts/image.sh",
	"bench":  "make bench-data: BENCH_PACKAGES in scripts/rootfs.sh, installed into the kernel VM's cached root only",
	// Steps whose programs the project does not install.
	"prereq": "what docs/development.md (\"Set-up\") asks for before make can run",
	"manual": "optional targets run by hand (make bench -perf: linux-perf)",
}

// unlisted steps have no package list of the project's.
var unlisted = map[string]bool{"base": true, "prereq": true, "manual": true}

// inRoot steps install their packages into a cached root filesystem
// (scripts/rootfs.sh), never on this machine, whose dpkg cannot see them.
var inRoot = map[string]bool{"bench": true}

// OnlyInRoot reports whether every step of the entry installs into a
// cached root.
func (e Entry) OnlyInRoot() bool {
	for _, s := range e.Steps {
		if !inRoot[s] {
			return false
		}
	}
	return len(e.Steps) > 0
}

// Entry is one program of the list.
type Entry struct {
	Program  string
	Provider string
	Steps    []string
	Line     int
}

// List is the parsed program list, by program name.
type List map[string]Entry

// ParseList reads "program provider step[,step...]" lines; '#' starts a
// comment.
func ParseList(r io.Reader) (List, error) {
	l := List{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want \"program provider steps\", got %q", n, strings.Join(f, " "))
		}
		e := Entry{Program: f[0], Provider: f[1], Steps: strings.Split(f[2], ","), Line: n}
		for _, s := range e.Steps {
			if _, ok := knownSteps[s]; !ok {
				return nil, fmt.Errorf("line %d: unknown step %q (known: %s)", n, s, strings.Join(stepNames(), ", "))
			}
		}
		if e.Provider == providerUser && !(e.Has("prereq") || e.Has("manual")) {
			return nil, fmt.Errorf("line %d: %s: provider - (brought by the user) is only for steps prereq and manual", n, e.Program)
		}
		if _, dup := l[e.Program]; dup {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, e.Program)
		}
		l[e.Program] = e
	}
	return l, sc.Err()
}

func stepNames() []string {
	var s []string
	for k := range knownSteps {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Has reports whether the entry is needed by step s.
func (e Entry) Has(s string) bool {
	for _, x := range e.Steps {
		if x == s {
			return true
		}
	}
	return false
}
