package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// PackageLists returns, per step, the Debian packages the project installs
// for it: DEB_PACKAGES of the Makefile (deps), the runtime stage of
// build/Dockerfile (image), and every NAME_PACKAGES array of the scripts
// (step "name": E2E_PACKAGES is e2e).
func PackageLists(root string, scripts []string) (map[string]map[string]bool, error) {
	lists := map[string]map[string]bool{}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	lists["deps"] = set(makeVariable(string(mk), "DEB_PACKAGES"))
	df, err := os.ReadFile(filepath.Join(root, "build/Dockerfile"))
	if err != nil {
		return nil, err
	}
	lists["image"] = set(dockerfileRuntimePackages(string(df)))
	for _, s := range scripts {
		b, err := os.ReadFile(filepath.Join(root, s))
		if err != nil {
			return nil, err
		}
		f, err := syntax.NewParser().Parse(strings.NewReader(string(b)), s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		syntax.Walk(f, func(n syntax.Node) bool {
			as, ok := n.(*syntax.Assign)
			if !ok || as.Array == nil || !strings.HasSuffix(as.Name.Value, "_PACKAGES") {
				return true
			}
			step := strings.ToLower(strings.TrimSuffix(as.Name.Value, "_PACKAGES"))
			if lists[step] == nil {
				lists[step] = map[string]bool{}
			}
			for _, el := range as.Array.Elems {
				if v, ok := literal(el.Value); ok {
					lists[step][v] = true
				}
			}
			return true
		})
	}
	return lists, nil
}

func set(items []string) map[string]bool {
	m := map[string]bool{}
	for _, i := range items {
		m[i] = true
	}
	return m
}

// makeVariable returns the words of a Makefile variable (":=" or "=",
// backslash continuations joined).
func makeVariable(text, name string) []string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:?=(.*)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// dockerfileRuntimePackages returns what the apt-get install of the stage
// named runtime (or, without one, the last stage) names.
func dockerfileRuntimePackages(text string) []string {
	// The stage named runtime, else the last one.
	stages := regexp.MustCompile(`(?m)^FROM `).Split(text, -1)
	last := stages[len(stages)-1]
	for _, st := range stages[1:] {
		head, _, _ := strings.Cut(st, "\n")
		if f := strings.Fields(head); len(f) == 3 && strings.EqualFold(f[1], "AS") && f[2] == "runtime" {
			last = st
		}
	}
	last = strings.ReplaceAll(last, "\\\n", " ")
	var out []string
	for _, m := range regexp.MustCompile(`apt-get install([^&\n]*)`).FindAllStringSubmatch(last, -1) {
		for _, w := range strings.Fields(m[1]) {
			if !strings.HasPrefix(w, "-") {
				out = append(out, w)
			}
		}
	}
	return out
}

// Dpkg answers questions about installed Debian packages.
type Dpkg interface {
	// Owner returns the package that installed the program found on PATH,
	// "" when the program is not installed.
	Owner(program string) (string, error)
	// Base reports whether pkg is on every Debian system (Essential, or
	// Priority required), as far as the installed package says.
	Base(pkg string) (bool, error)
}

// systemDpkg reads dpkg's database on this machine, once: the file lists
// of the installed packages (/var/lib/dpkg/info/*.list) and their
// Essential and Priority fields.
type systemDpkg struct {
	once   sync.Once
	err    error
	owners map[string]string // file path -> package
	base   map[string]bool   // installed package -> on every Debian system
}

func (d *systemDpkg) load() error {
	d.once.Do(func() {
		d.owners, d.base = map[string]string{}, map[string]bool{}
		lists, err := filepath.Glob("/var/lib/dpkg/info/*.list")
		if err != nil {
			d.err = err
			return
		}
		for _, l := range lists {
			pkg := strings.SplitN(strings.TrimSuffix(filepath.Base(l), ".list"), ":", 2)[0]
			b, err := os.ReadFile(l)
			if err != nil {
				d.err = err
				return
			}
			for _, f := range strings.Split(string(b), "\n") {
				if _, seen := d.owners[f]; f != "" && !seen {
					d.owners[f] = pkg
				}
			}
		}
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Package} ${Essential} ${Priority}\n").Output()
		if err != nil {
			d.err = fmt.Errorf("dpkg-query: %w", err)
			return
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 {
				d.base[f[0]] = f[1] == "yes" || f[2] == "required"
			} else if len(f) == 2 { // no Essential field
				d.base[f[0]] = f[1] == "required"
			}
		}
	})
	return d.err
}

func (d *systemDpkg) Owner(program string) (string, error) {
	if err := d.load(); err != nil {
		return "", err
	}
	p, err := exec.LookPath(program)
	if err != nil {
		return "", nil
	}
	// dpkg records one spelling of a path; with a merged /usr the one on
	// PATH may be the other, and alternatives are symlinks.
	cands := []string{p, strings.TrimPrefix(p, "/usr"), "/usr" + p}
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		cands = append(cands, r, strings.TrimPrefix(r, "/usr"))
	}
	for _, c := range cands {
		if pkg, ok := d.owners[c]; ok {
			return pkg, nil
		}
	}
	return "", fmt.Errorf("%s is installed at %s but no package owns it", program, p)
}

func (d *systemDpkg) Base(pkg string) (bool, error) {
	if err := d.load(); err != nil {
		return false, err
	}
	return d.base[pkg], nil // not installed here: cannot tell
}
