// Command programs keeps scripts/programs.txt, the one list of the external
// programs the project runs, true:
//
//	go run ./scripts/programs check [-strict]   (make lint)
//	go run ./scripts/programs installed STEP    (make fresh: after make deps)
//
// check fails, naming program and package, when a program is run by the
// plugin, the tests or the scripts but not listed; when a listed program is
// run by nothing; when its package is missing from the package list of a
// step that needs it (DEB_PACKAGES for deps, the Dockerfile's runtime stage
// for the plugin's image, ...); and when dpkg says the program comes from
// another package. Programs not installed on this machine cannot be checked
// with dpkg: -strict makes that a failure too (CI, once every step has
// installed its packages).
//
// installed fails when a program a step needs is not on PATH.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const listFile = "scripts/programs.txt"

func main() {
	root := flag.String("root", ".", "the repository's top directory")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: programs [-root DIR] check [-strict] | installed STEP")
	}
	flag.Parse()
	args := flag.Args()
	var err error
	switch {
	case len(args) >= 1 && args[0] == "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		strict := fs.Bool("strict", false, "fail for a program dpkg cannot check because it is not installed")
		_ = fs.Parse(args[1:])
		err = runCheck(os.Stdout, *root, *strict, &systemDpkg{})
	case len(args) == 2 && args[0] == "installed":
		err = runInstalled(os.Stdout, *root, args[1])
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "programs:", err)
		os.Exit(1)
	}
}

func loadList(root string) (List, error) {
	f, err := os.Open(filepath.Join(root, listFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := ParseList(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", listFile, err)
	}
	return l, nil
}

func shellScripts(root string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
	}
	if _, err := os.Stat(filepath.Join(root, ".ci/run")); err == nil {
		out = append(out, ".ci/run")
	}
	return out, nil
}

// Scan returns every use of a program in the tree.
func Scan(root string) ([]Use, []Problem, error) {
	uses, probs, err := ScanGo(root, []string{"cmd", "internal", "e2e", "scripts"})
	if err != nil {
		return nil, nil, err
	}
	scripts, err := shellScripts(root)
	if err != nil {
		return nil, nil, err
	}
	su, sp, err := ScanShell(root, scripts, "Makefile")
	if err != nil {
		return nil, nil, err
	}
	return append(uses, su...), append(probs, sp...), nil
}

func runCheck(w io.Writer, root string, strict bool, dpkg Dpkg) error {
	list, err := loadList(root)
	if err != nil {
		return err
	}
	uses, probs, err := Scan(root)
	if err != nil {
		return err
	}
	scripts, err := shellScripts(root)
	if err != nil {
		return err
	}
	lists, err := PackageLists(root, scripts)
	if err != nil {
		return err
	}
	fails := Check(list, uses, probs, lists, dpkg, strict)
	if len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintln(w, f)
		}
		return fmt.Errorf("%d problem(s) with %s", len(fails), listFile)
	}
	fmt.Fprintf(w, "programs: %d listed, %d uses found, all listed and provided\n", len(list), len(uses))
	return nil
}

// Check returns one line per problem.
func Check(list List, uses []Use, probs []Problem, lists map[string]map[string]bool, dpkg Dpkg, strict bool) []string {
	var fails []string
	for _, p := range probs {
		fails = append(fails, p.Where+": "+p.Msg)
	}
	used := map[string][]Use{}
	for _, u := range uses {
		used[u.Program] = append(used[u.Program], u)
	}
	for _, name := range sortedUseNames(used) {
		us := used[name]
		e, ok := list[name]
		if !ok {
			hint := "<package>"
			if owner, _ := dpkg.Owner(name); owner != "" {
				hint = owner
			}
			fails = append(fails, fmt.Sprintf("%s: %s is run but not listed in %s: add \"%s %s <steps>\"", us[0].Where, name, listFile, name, hint))
			continue
		}
		for _, u := range us {
			if u.Part == partPlugin && !e.Has("image") && e.Provider != providerGo {
				fails = append(fails, fmt.Sprintf("%s: the plugin runs %s, so its package %s must be in the image (step \"image\": %s)", u.Where, name, e.Provider, knownSteps["image"]))
				break
			}
		}
	}
	for _, name := range sortedEntryNames(list) {
		e := list[name]
		if len(used[name]) == 0 {
			fails = append(fails, fmt.Sprintf("%s:%d: %s is listed but nothing runs it", listFile, e.Line, name))
		}
		fails = append(fails, checkProvider(e, lists, dpkg, strict)...)
	}
	return fails
}

func checkProvider(e Entry, lists map[string]map[string]bool, dpkg Dpkg, strict bool) []string {
	where := fmt.Sprintf("%s:%d: %s", listFile, e.Line, e.Program)
	switch e.Provider {
	case providerGo:
		if _, err := exec.LookPath(e.Program); err != nil {
			return []string{where + ": not on PATH, yet listed as part of the Go toolchain"}
		}
		return nil
	case providerUser:
		return nil
	}
	var fails []string
	base, err := dpkg.Base(e.Provider)
	if err != nil {
		return []string{where + ": " + err.Error()}
	}
	for _, s := range e.Steps {
		switch {
		case s == "base":
			if !base {
				fails = append(fails, fmt.Sprintf("%s: package %s is not on every Debian system (neither Essential nor Priority required here): name the step that installs it", where, e.Provider))
			}
		case unlisted[s]:
		case lists[s] == nil:
			fails = append(fails, fmt.Sprintf("%s: step %s has no package list (%s)", where, s, knownSteps[s]))
		case !lists[s][e.Provider] && !base:
			fails = append(fails, fmt.Sprintf("%s: package %s is not installed by step %s (%s)", where, e.Provider, s, knownSteps[s]))
		}
	}
	owner, err := dpkg.Owner(e.Program)
	switch {
	case err != nil:
		fails = append(fails, where+": "+err.Error())
	case owner == "" && strict && !e.Has("manual") && !e.OnlyInRoot():
		fails = append(fails, fmt.Sprintf("%s: not installed on this machine, so dpkg cannot confirm it comes from %s", where, e.Provider))
	case owner != "" && owner != e.Provider:
		fails = append(fails, fmt.Sprintf("%s: dpkg says it comes from package %s, not %s", where, owner, e.Provider))
	}
	return fails
}

func runInstalled(w io.Writer, root, step string) error {
	if _, ok := knownSteps[step]; !ok {
		return fmt.Errorf("unknown step %q", step)
	}
	list, err := loadList(root)
	if err != nil {
		return err
	}
	var missing []string
	for _, name := range sortedEntryNames(list) {
		e := list[name]
		if e.Provider == providerUser || !(e.Has(step) || e.Has("base")) {
			continue
		}
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, fmt.Sprintf("%s (package %s)", name, e.Provider))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing in a fresh root after step %s: %s", step, strings.Join(missing, ", "))
	}
	fmt.Fprintf(w, "programs: every program of step %s is installed\n", step)
	return nil
}

func sortedUseNames(m map[string][]Use) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

func sortedEntryNames(l List) []string {
	var s []string
	for k := range l {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
