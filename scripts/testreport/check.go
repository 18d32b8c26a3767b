package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// verdict is the check of one run against one section.
type verdict struct {
	Part            string
	Ran             int // listed tests and subtests that ran and passed
	ExpectedSkips   int
	Failed          []string // ran and failed, or started and never ended
	UnexpectedSkips []string // skipped, though listed to run (or not listed at all)
	NotRun          []string // listed, yet never started
	Unlisted        []string // ran, but the list does not name them
	WrongSkip       []string // listed to skip, but ran, or skipped for another reason
	Messages        map[string]string
	PackageFailed   bool
}

func (v *verdict) ok() bool {
	return len(v.Failed)+len(v.UnexpectedSkips)+len(v.NotRun)+len(v.Unlisted)+len(v.WrongSkip) == 0 && !v.PackageFailed
}

// check judges one run by its section.
func check(part string, s *section, r *run) *verdict {
	v := &verdict{Part: part, Messages: map[string]string{}, PackageFailed: r.Failed}
	for _, name := range sortedKeys(s.Entries) {
		e := s.Entries[name]
		t := r.Tests[name]
		switch e.Kind {
		case excluded:
			if t != nil {
				v.Unlisted = append(v.Unlisted, name)
				v.Messages[name] = "ran, though listed as excluded (" + e.Reason + ")"
			}
		case mustRun:
			switch {
			case t == nil:
				v.NotRun = append(v.NotRun, name)
			case t.Action == "pass":
				v.Ran++
			case t.Action == "skip":
				v.UnexpectedSkips = append(v.UnexpectedSkips, name)
				v.Messages[name] = t.skipMessage()
			default:
				v.Failed = append(v.Failed, name)
			}
		case mustSkip:
			switch {
			case t == nil:
				v.NotRun = append(v.NotRun, name)
			case t.Action == "skip" && strings.Contains(t.skipMessage(), e.Match):
				v.ExpectedSkips++
			case t.Action == "skip":
				v.WrongSkip = append(v.WrongSkip, name)
				v.Messages[name] = fmt.Sprintf("skipped saying %q, not %q (%s)", t.skipMessage(), e.Match, e.Reason)
			case t.Action == "pass":
				v.WrongSkip = append(v.WrongSkip, name)
				v.Messages[name] = "ran and passed, though listed as skipping (" + e.Reason + "): update the list"
			default:
				v.Failed = append(v.Failed, name)
			}
		}
	}
	for _, name := range r.Order {
		if s.Entries[name] != nil {
			continue
		}
		t := r.Tests[name]
		switch t.Action {
		case "skip":
			v.UnexpectedSkips = append(v.UnexpectedSkips, name)
			v.Messages[name] = t.skipMessage()
		case "pass":
			v.Unlisted = append(v.Unlisted, name)
		default:
			v.Failed = append(v.Failed, name)
		}
	}
	sort.Strings(v.Unlisted)
	sort.Strings(v.UnexpectedSkips)
	sort.Strings(v.Failed)
	return v
}

// print writes the verdict: one line per problem, then the summary line.
func (v *verdict) print(w io.Writer, step string, r *run, verbose bool) {
	prefix := step
	if v.Part != "" {
		prefix += " " + v.Part
	}
	if verbose {
		for _, t := range r.topLevel() {
			state := map[string]string{"pass": "ok", "fail": "FAIL", "skip": "skipped", "": "NO END"}[t.Action]
			fmt.Fprintf(w, "%s: %-44s %-7s %.1fs\n", prefix, t.Name, state, t.Elapsed)
		}
	}
	for _, n := range v.Failed {
		// go test's own words, which CI's log readers look for.
		fmt.Fprintf(w, "%s: --- FAIL: %s\n", prefix, n)
		if t := r.Tests[n]; t != nil {
			for _, l := range tail(t.Output, 30) {
				fmt.Fprintf(w, "%s:     %s\n", prefix, l)
			}
		}
	}
	for _, n := range v.UnexpectedSkips {
		fmt.Fprintf(w, "%s: UNEXPECTED SKIP %s: %s\n", prefix, n, v.Messages[n])
	}
	for _, n := range v.NotRun {
		fmt.Fprintf(w, "%s: DID NOT RUN %s (listed)\n", prefix, n)
	}
	for _, n := range v.Unlisted {
		msg := v.Messages[n]
		if msg == "" {
			msg = "ran but is not in the list: add it"
		}
		fmt.Fprintf(w, "%s: NOT LISTED %s: %s\n", prefix, n, msg)
	}
	for _, n := range v.WrongSkip {
		fmt.Fprintf(w, "%s: WRONG SKIP %s: %s\n", prefix, n, v.Messages[n])
	}
	if v.PackageFailed && len(v.Failed) == 0 {
		fmt.Fprintf(w, "%s: the test binary failed outside any test:\n", prefix)
		for _, l := range tail(r.Trailer, 30) {
			fmt.Fprintf(w, "%s:     %s\n", prefix, l)
		}
	}
	fmt.Fprintf(w, "%s: %s\n", prefix, v.summary())
}

func (v *verdict) summary() string {
	s := fmt.Sprintf("ran %d, expected skips %d, unexpected skips %d", v.Ran, v.ExpectedSkips, len(v.UnexpectedSkips))
	if other := len(v.Failed) + len(v.NotRun) + len(v.Unlisted) + len(v.WrongSkip); other > 0 || v.PackageFailed {
		s += fmt.Sprintf("; failed %d, not run %d, not listed %d, wrong skips %d", len(v.Failed), len(v.NotRun), len(v.Unlisted), len(v.WrongSkip))
	}
	if names := firstFailed(v.Failed, 8); names != "" {
		s += "; failing: " + names
	}
	return s
}

// firstFailed names up to n failed top-level tests in the summary line,
// the last a log's reader is sure to see (the failures' own lines may be
// far above it).
func firstFailed(failed []string, n int) string {
	var top []string
	for _, f := range failed {
		if !strings.Contains(f, "/") {
			top = append(top, f)
		}
	}
	if len(top) > n {
		return strings.Join(top[:n], ", ") + fmt.Sprintf(" and %d more", len(top)-n)
	}
	return strings.Join(top, ", ")
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
