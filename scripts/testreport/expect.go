package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// kind is what a list says of one test.
type kind int

const (
	mustRun  kind = iota // runs and passes
	mustSkip             // runs and skips itself (t.Skip), for the reason given
	excluded             // left out of the run (go test -skip), for the reason given
)

// entry is one test or subtest of a section.
type entry struct {
	Name   string
	Kind   kind
	Match  string // for mustSkip: text the test's skip message must hold ("" = any)
	Reason string // for mustSkip and excluded: why, for the reader and the report
	Line   int
}

// section is the list of one part of a step: a guest, a cell's suite, a pass.
type section struct {
	Name    string
	All     bool // the whole package runs: no -run, and anything not listed fails the check
	Entries map[string]*entry
}

// A list file holds sections:
//
//	# comment
//	[name]
//	all                               # the whole package runs (no -run)
//	use OTHER                         # every line of section OTHER, as if written here
//	TestName                          # must run and pass (subtests: TestName/sub)
//	skip TestName "text" -- reason    # must skip itself, saying "text" (optional)
//	exclude TestName -- reason        # left out with go test -skip
//
// A later line about a name replaces an earlier one (so a section can use
// another and change a few of its lines).
func parseList(r io.Reader) (map[string]*section, error) {
	sections := map[string]*section{}
	var cur *section
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: bad section header %q", n, line)
			}
			name := strings.TrimSpace(line[1 : len(line)-1])
			if name == "" || sections[name] != nil {
				return nil, fmt.Errorf("line %d: empty or repeated section %q", n, name)
			}
			cur = &section{Name: name, Entries: map[string]*entry{}}
			sections[name] = cur
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("line %d: %q before any [section]", n, line)
		}
		if err := cur.parseLine(line, n, sections); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, s := range sections {
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("section [%s]: %w", s.Name, err)
		}
	}
	return sections, nil
}

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]*(/[^\s/]+)*$`)

func (s *section) parseLine(line string, n int, sections map[string]*section) error {
	word, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch word {
	case "all":
		if rest != "" {
			return fmt.Errorf("all takes nothing after it")
		}
		s.All = true
		return nil
	case "use":
		other := sections[rest]
		if other == nil {
			return fmt.Errorf("use %q: no such section above", rest)
		}
		s.All = s.All || other.All
		for name, e := range other.Entries {
			c := *e
			s.Entries[name] = &c
		}
		return nil
	case "skip", "exclude":
		e, err := parseReasoned(word, rest)
		if err != nil {
			return err
		}
		e.Line = n
		s.Entries[e.Name] = e
		return nil
	}
	if !testName.MatchString(line) {
		return fmt.Errorf("%q is not a test name, nor all, use, skip or exclude", line)
	}
	s.Entries[line] = &entry{Name: line, Kind: mustRun, Line: n}
	return nil
}

// parseReasoned reads `NAME ["text"] -- reason`.
func parseReasoned(word, rest string) (*entry, error) {
	head, reason, ok := strings.Cut(rest, " -- ")
	reason = strings.TrimSpace(reason)
	if !ok || reason == "" {
		return nil, fmt.Errorf("%s %s: the reason is missing (%s NAME -- reason)", word, rest, word)
	}
	name, match, _ := strings.Cut(strings.TrimSpace(head), " ")
	if !testName.MatchString(name) {
		return nil, fmt.Errorf("%s: %q is not a test name", word, name)
	}
	e := &entry{Name: name, Kind: excluded, Reason: reason}
	if word == "skip" {
		e.Kind = mustSkip
		if match = strings.TrimSpace(match); match != "" {
			m, err := strconv.Unquote(match)
			if err != nil {
				return nil, fmt.Errorf("skip %s: the text to match must be quoted: %s", name, match)
			}
			e.Match = m
		}
	} else if strings.TrimSpace(match) != "" {
		return nil, fmt.Errorf("exclude %s: unexpected %q", name, match)
	}
	return e, nil
}

// validate: no test both listed and under an excluded parent; every listed
// subtest's parent listed too (a subtest runs only inside its parent).
func (s *section) validate() error {
	for _, name := range sortedKeys(s.Entries) {
		e := s.Entries[name]
		if e.Kind == excluded {
			continue
		}
		for p := parent(name); p != ""; p = parent(p) {
			pe := s.Entries[p]
			switch {
			case pe == nil:
				return fmt.Errorf("%s is listed but its parent %s is not", name, p)
			case pe.Kind == excluded:
				return fmt.Errorf("%s is listed but its parent %s is excluded", name, p)
			case pe.Kind == mustSkip:
				return fmt.Errorf("%s is listed but its parent %s skips", name, p)
			}
		}
	}
	return nil
}

func parent(name string) string {
	i := strings.LastIndex(name, "/")
	if i < 0 {
		return ""
	}
	return name[:i]
}

// args are go test's -run and -skip flags for the section, one per line,
// in the test binary's spelling (-test.run).
func (s *section) args() ([]string, error) {
	var out []string
	if !s.All {
		var top []string
		for name, e := range s.Entries {
			if e.Kind != excluded && !strings.Contains(name, "/") {
				top = append(top, regexp.QuoteMeta(name))
			}
		}
		if len(top) == 0 {
			return nil, fmt.Errorf("section [%s] lists no test to run", s.Name)
		}
		sort.Strings(top)
		out = append(out, "-test.run=^("+strings.Join(top, "|")+")$")
	}
	skip, err := s.skipPattern()
	if err != nil {
		return nil, err
	}
	if skip != "" {
		out = append(out, "-test.skip="+skip)
	}
	return out, nil
}

// skipPattern turns the excluded names into one -skip pattern. go test
// splits the pattern at each slash into one expression per level, so names
// of several levels can only be left out together when they form a full
// product (every listed parent with every listed child); anything else is
// refused rather than leaving out more than the list says.
func (s *section) skipPattern() (string, error) {
	var names []string
	for name, e := range s.Entries {
		if e.Kind == excluded {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	sort.Strings(names)
	depth := strings.Count(names[0], "/")
	levels := make([]map[string]bool, depth+1)
	for i := range levels {
		levels[i] = map[string]bool{}
	}
	for _, n := range names {
		parts := strings.Split(n, "/")
		if len(parts) != depth+1 {
			return "", fmt.Errorf("section [%s]: excluded names of different depths (%s, %s) cannot share one -skip", s.Name, names[0], n)
		}
		for i, p := range parts {
			levels[i][p] = true
		}
	}
	product := 1
	var exprs []string
	for _, l := range levels {
		product *= len(l)
		var alts []string
		for _, p := range sortedKeys(l) {
			alts = append(alts, regexp.QuoteMeta(p))
		}
		exprs = append(exprs, "^("+strings.Join(alts, "|")+")$")
	}
	if product != len(names) {
		return "", fmt.Errorf("section [%s]: the excluded names %v are not a full product of their levels: one -skip would leave out more", s.Name, names)
	}
	return strings.Join(exprs, "/"), nil
}
