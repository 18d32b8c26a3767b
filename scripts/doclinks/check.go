package main

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
)

// tree is the repository as the check sees it: its files by slash path
// from the top, and a reader for the Markdown ones.
type tree struct {
	files map[string]bool
	dirs  map[string]bool
	read  func(name string) (string, error)
}

func newTree(files []string, read func(string) (string, error)) *tree {
	t := &tree{files: map[string]bool{}, dirs: map[string]bool{".": true}, read: read}
	for _, f := range files {
		f = path.Clean(f)
		t.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			t.dirs[d] = true
		}
	}
	return t
}

// problem is one link that does not resolve.
type problem struct {
	file string
	line int
	dest string
	why  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.dest, p.why) }

// external destinations (a URL scheme, or //host) are not checked.
var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// check reads every Markdown file of t and returns the links that do not
// resolve: a relative path to no file or directory of the tree (or out of
// it), or an #anchor that no heading or HTML id of the target defines.
func check(t *tree) ([]problem, error) {
	docs := map[string]doc{}
	load := func(name string) (doc, error) {
		if d, ok := docs[name]; ok {
			return d, nil
		}
		text, err := t.read(name)
		if err != nil {
			return doc{}, err
		}
		d := parse(text)
		docs[name] = d
		return d, nil
	}
	var names []string
	for f := range t.files {
		if isMarkdown(f) {
			names = append(names, f)
		}
	}
	sort.Strings(names)
	var out []problem
	for _, name := range names {
		d, err := load(name)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			why, err := t.resolve(name, l.dest, load)
			if err != nil {
				return nil, err
			}
			if why != "" {
				out = append(out, problem{file: name, line: l.line, dest: l.dest, why: why})
			}
		}
	}
	return out, nil
}

// resolve says why dest, a link in file from, does not resolve ("" when it
// does).
func (t *tree) resolve(from, dest string, load func(string) (doc, error)) (string, error) {
	if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return "", nil
	}
	target, frag, _ := strings.Cut(dest, "#")
	if target == "" {
		target = from
	} else {
		p, err := url.PathUnescape(target)
		if err != nil {
			return "not a valid path: " + err.Error(), nil
		}
		if strings.Contains(p, "?") {
			p, _, _ = strings.Cut(p, "?")
		}
		if strings.HasPrefix(p, "/") {
			// GitHub resolves a leading / from the repository's top.
			target = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			target = path.Join(path.Dir(from), p)
		}
		if target == ".." || strings.HasPrefix(target, "../") {
			return "points out of the repository", nil
		}
		if !t.files[target] && !t.dirs[target] {
			return fmt.Sprintf("no file or directory %s in the repository", target), nil
		}
	}
	if frag == "" || !isMarkdown(target) || !t.files[target] {
		return "", nil
	}
	d, err := load(target)
	if err != nil {
		return "", err
	}
	anchor, err := url.PathUnescape(frag)
	if err != nil {
		anchor = frag
	}
	if !d.anchors[anchor] {
		return fmt.Sprintf("no heading or id %q in %s", frag, target), nil
	}
	return "", nil
}

func isMarkdown(name string) bool { return strings.EqualFold(path.Ext(name), ".md") }
