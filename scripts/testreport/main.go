// Command testreport holds each long test step to a list, kept beside its
// script, of the tests and subtests it must run, and of those that skip
// there on purpose, each with its reason (scripts/*.tests):
//
//	testreport args -list FILE SECTION
//	    go test's -test.run and -test.skip flags for SECTION, one per line
//	testreport check -list FILE -step NAME [-v] SECTION=EVENTS.json...
//	    judge each run (go test -json / test2json output) by its section;
//	    one line per problem and per part, and a last line for the step:
//	    "NAME: ran N, expected skips M, unexpected skips 0" (-q: that line
//	    and the problems only)
//	testreport summary -step NAME [-v] PART=EVENTS.json...
//	    a run without a list (a few tests picked by hand): what ran, what
//	    skipped and why, and the failures; fails if any test failed
//	go test -json ... | testreport pipe -o EVENTS.json
//	    keeps the events in EVENTS.json and shows the tests' output as
//	    go test -v would, while they run
//	testreport names EVENTS.json
//	    the tests of a run, in the list's syntax (to write or renew a list)
//
// check fails when a listed test fails, skips, or does not run; when a test
// listed to skip runs or skips for another reason; and when a test runs
// that the list does not name (a new test joins the list on purpose).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	if err := cli(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

var errFailed = errors.New("the step did not run what its list says")

func cli(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: testreport args|check|summary|pipe|names ...")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	list := fs.String("list", "", "the list file (scripts/*.tests)")
	step := fs.String("step", "", "the step's name, for the report")
	verbose := fs.Bool("v", false, "one line per top-level test with its time")
	quiet := fs.Bool("q", false, "check: print problems and the step's line only")
	outFile := fs.String("o", "", "pipe: where the events go")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "args":
		if fs.NArg() != 1 {
			return errors.New("usage: testreport args -list FILE SECTION")
		}
		s, err := loadSection(*list, fs.Arg(0))
		if err != nil {
			return err
		}
		flags, err := s.args()
		if err != nil {
			return err
		}
		for _, f := range flags {
			fmt.Fprintln(w, f)
		}
		return nil
	case "check":
		if fs.NArg() == 0 || *step == "" {
			return errors.New("usage: testreport check -list FILE -step NAME [-v] SECTION=EVENTS.json...")
		}
		return checkAll(w, *list, *step, *verbose, *quiet, fs.Args())
	case "summary":
		if fs.NArg() == 0 || *step == "" {
			return errors.New("usage: testreport summary -step NAME [-v] PART=EVENTS.json...")
		}
		return summarize(w, *step, *verbose, fs.Args())
	case "pipe":
		if *outFile == "" || fs.NArg() != 0 {
			return errors.New("usage: go test -json ... | testreport pipe -o EVENTS.json")
		}
		return pipe(os.Stdin, w, *outFile)
	case "names":
		if fs.NArg() != 1 {
			return errors.New("usage: testreport names EVENTS.json")
		}
		r, err := readRun(fs.Arg(0))
		if err != nil {
			return err
		}
		for _, n := range r.Order {
			t := r.Tests[n]
			if t.Action == "skip" {
				fmt.Fprintf(w, "skip %s -- %s\n", n, t.skipMessage())
			} else {
				fmt.Fprintln(w, n)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command %q (args, check, summary, pipe, names)", args[0])
}

func loadSection(file, name string) (*section, error) {
	if file == "" {
		return nil, errors.New("-list FILE is required")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sections, err := parseList(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s := sections[name]
	if s == nil {
		return nil, fmt.Errorf("%s has no section [%s]", file, name)
	}
	return s, nil
}

func readRun(file string) (*run, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRun(f)
}

// checkAll judges each SECTION=EVENTS part and prints the step's total.
// A part whose events file is missing did not run at all: every test it
// lists is reported as not run.
func checkAll(w io.Writer, list, step string, verbose, quiet bool, parts []string) error {
	var total verdict
	ok := true
	for _, p := range parts {
		name, file, found := strings.Cut(p, "=")
		if !found {
			return fmt.Errorf("%q: want SECTION=EVENTS.json", p)
		}
		s, err := loadSection(list, name)
		if err != nil {
			return err
		}
		r, err := readRun(file)
		if errors.Is(err, os.ErrNotExist) {
			r, err = &run{Tests: map[string]*result{}, Failed: true, Trailer: []string{"no test output: " + file}}, nil
		}
		if err != nil {
			return err
		}
		v := check(name, s, r)
		if !quiet || !v.ok() {
			v.print(w, step, r, verbose)
		}
		ok = ok && v.ok()
		total.Ran += v.Ran
		total.ExpectedSkips += v.ExpectedSkips
		total.UnexpectedSkips = append(total.UnexpectedSkips, v.UnexpectedSkips...)
		total.Failed = append(total.Failed, v.Failed...)
		total.NotRun = append(total.NotRun, v.NotRun...)
		total.Unlisted = append(total.Unlisted, v.Unlisted...)
		total.WrongSkip = append(total.WrongSkip, v.WrongSkip...)
		total.PackageFailed = total.PackageFailed || v.PackageFailed
	}
	if len(parts) > 1 || quiet {
		fmt.Fprintf(w, "%s: %s\n", step, total.summary())
	}
	if !ok {
		return errFailed
	}
	return nil
}

// summarize reports runs that no list judges: every skip is shown with its
// reason, every failure with its output.
func summarize(w io.Writer, step string, verbose bool, parts []string) error {
	failed, ran := false, 0
	for _, p := range parts {
		name, file, found := strings.Cut(p, "=")
		if !found {
			return fmt.Errorf("%q: want PART=EVENTS.json", p)
		}
		r, err := readRun(file)
		if errors.Is(err, os.ErrNotExist) {
			r, err = &run{Tests: map[string]*result{}, Failed: true, Trailer: []string{"no test output: " + file}}, nil
		}
		if err != nil {
			return err
		}
		// Judged by an "all" section that lists every test as it went:
		// skips and failures show up as such, nothing as unlisted.
		s := &section{Name: name, All: true, Entries: map[string]*entry{}}
		for n, t := range r.Tests {
			if t.Action == "pass" {
				s.Entries[n] = &entry{Name: n, Kind: mustRun}
			}
		}
		v := check(name, s, r)
		skips := v.UnexpectedSkips
		v.UnexpectedSkips = nil
		v.ExpectedSkips = len(skips) // a hand-picked run expects what it gets
		prefix := step + " " + name
		for _, n := range skips {
			fmt.Fprintf(w, "%s: skipped %s: %s\n", prefix, n, v.Messages[n])
		}
		v.print(w, step, r, verbose)
		failed = failed || !v.ok()
		ran += v.Ran + v.ExpectedSkips
	}
	// A part may have nothing of the tests picked (a -run that matches none
	// of its package's); the step as a whole must have run something.
	if failed || ran == 0 {
		return errFailed
	}
	return nil
}

// pipe copies events to file and their output text to w as it comes.
func pipe(r io.Reader, w io.Writer, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := f.Write(append(line, '\n')); err != nil {
			f.Close()
			return err
		}
		var e event
		if json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(w, string(line)) // not an event: a build error, say
			continue
		}
		if e.Action == "output" {
			fmt.Fprint(w, e.Output)
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
