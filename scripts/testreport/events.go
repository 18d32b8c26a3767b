package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of `go test -json` (or test2json) output.
type event struct {
	Action  string
	Test    string
	Package string
	Output  string
	Elapsed float64
}

// result is what a run says of one test or subtest.
type result struct {
	Name    string
	Action  string // pass, fail, skip; "" when it started but never ended (a crash, a timeout)
	Elapsed float64
	Output  []string // its own output lines, in order
}

// run is the outcome of one `go test -json` stream.
type run struct {
	Tests   map[string]*result
	Order   []string // names in the order they started
	Failed  bool     // the package (or the binary) failed as a whole
	Trailer []string // output outside any test (build errors, panics, the final FAIL)
}

// parseRun reads test2json events. Lines that are not JSON (a test binary's
// own noise before test2json took over, a shell's message) are kept as
// trailer output: they may explain a failure.
func parseRun(r io.Reader) (*run, error) {
	out := &run{Tests: map[string]*result{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			out.Trailer = append(out.Trailer, string(line))
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "fail":
				out.Failed = true
			case "output":
				out.Trailer = append(out.Trailer, strings.TrimRight(e.Output, "\n"))
			}
			continue
		}
		t := out.Tests[e.Test]
		if t == nil {
			t = &result{Name: e.Test}
			out.Tests[e.Test] = t
			out.Order = append(out.Order, e.Test)
		}
		switch e.Action {
		case "pass", "fail", "skip":
			t.Action = e.Action
			t.Elapsed = e.Elapsed
		case "output":
			t.Output = append(t.Output, strings.TrimRight(e.Output, "\n"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading test events: %w", err)
	}
	return out, nil
}

// skipMessage is what a skipped test said when it skipped: its output
// lines but the "=== RUN" and "--- SKIP" frames.
func (t *result) skipMessage() string {
	var msg []string
	for _, l := range t.Output {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		msg = append(msg, s)
	}
	return strings.Join(msg, " ")
}

// topLevel returns the run's top-level tests, in the order they started.
func (r *run) topLevel() []*result {
	var top []*result
	for _, n := range r.Order {
		if !strings.Contains(n, "/") {
			top = append(top, r.Tests[n])
		}
	}
	return top
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
